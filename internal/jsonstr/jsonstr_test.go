package jsonstr

import (
	"encoding/json"
	"testing"
)

func TestAppend(t *testing.T) {
	for _, tc := range []struct {
		in, canonical, encodingJSON string
	}{
		{"plain", `"plain"`, `"plain"`},
		{"a\"b\\c", `"a\"b\\c"`, `"a\"b\\c"`},
		{"\n\r\t", `"\n\r\t"`, `"\n\r\t"`},
		{"\b\f\x00\x1f", `"\u0008\u000c\u0000\u001f"`, `"\b\f\u0000\u001f"`},
		{"<a&b>", `"<a&b>"`, `"\u003ca\u0026b\u003e"`},
		{"\u2028x\u2029", `"\u2028x\u2029"`, `"\u2028x\u2029"`},
		{"ok\xffé\xc3", `"ok\ufffdé\ufffd"`, `"ok\ufffdé\ufffd"`},
	} {
		if got := string(Append(nil, tc.in, Canonical)); got != tc.canonical {
			t.Errorf("Canonical(%q) = %s; want %s", tc.in, got, tc.canonical)
		}
		if got := string(Append(nil, tc.in, EncodingJSON)); got != tc.encodingJSON {
			t.Errorf("EncodingJSON(%q) = %s; want %s", tc.in, got, tc.encodingJSON)
		}
		if want, _ := json.Marshal(tc.in); string(want) != tc.encodingJSON {
			t.Errorf("encoding/json writes %q as %s; the table says %s", tc.in, want, tc.encodingJSON)
		}
	}
}
