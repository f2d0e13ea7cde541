package sim

import (
	"strings"
	"testing"
)

// TestReadMooncakeRefusesHostileInput: each bound of the reader refuses a line past
// it with the line number and the bound, before anything is allocated for it.
func TestReadMooncakeRefusesHostileInput(t *testing.T) {
	ok := `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}` + "\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"not JSON", ok + "{\n", "line 2: unexpected end of JSON input"},
		{"missing fields", ok + `{"timestamp": 1}` + "\n", "line 2: want timestamp, input_length and output_length"},
		{"string length", `{"timestamp": 0, "input_length": "10", "output_length": 5}`, "line 1: json: cannot unmarshal string"},
		{"float length", `{"timestamp": 0, "input_length": 1.5, "output_length": 5}`, "line 1: json: cannot unmarshal number 1.5"},
		{"negative", `{"timestamp": -1, "input_length": 10, "output_length": 5}`, "line 1: negative timestamp or length"},
		{"huge timestamp", `{"timestamp": 1e300, "input_length": 10, "output_length": 5}`, "line 1: timestamp 1e+300 ms is past 2592000000 ms (30 days)"},
		{"empty prompt", `{"timestamp": 0, "input_length": 0, "output_length": 5}`, "line 1: input_length 0: a request needs a prompt"},
		{"huge prompt", `{"timestamp": 0, "input_length": 1048577, "output_length": 0}`, "line 1: input_length 1048577 or output_length 0 is past 1048576 tokens"},
		{"huge output", `{"timestamp": 0, "input_length": 100, "output_length": 1048577}`, "line 1: input_length 100 or output_length 1048577 is past"},
		{"overflowing output", `{"timestamp": 0, "input_length": 100, "output_length": 9223372036854775807}`, "line 1: input_length 100 or output_length 9223372036854775807 is past"},
		{"long line", ok + `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [` + strings.Repeat("1,", MaxMooncakeLineBytes/2) + "1]}\n",
			"line 2: longer than 1048576 bytes"},
	} {
		_, err := ReadMooncake(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v; want %q", tc.name, err, tc.want)
		}
	}
	if w, err := ReadMooncake(strings.NewReader(ok + "\n" + ok)); err != nil || len(w.Requests) != 2 {
		t.Fatalf("valid trace with a blank line: %v", err)
	}
}

// TestReadMooncakeRequestBound: a trace of more requests than the bound
// (MaxMooncakeRequests in ReadMooncake) is refused at the first line past it.
func TestReadMooncakeRequestBound(t *testing.T) {
	line := `{"timestamp":0,"input_length":1,"output_length":1}` + "\n"
	if _, err := readMooncake(strings.NewReader(strings.Repeat(line, 3)), 3); err != nil {
		t.Fatal(err)
	}
	_, err := readMooncake(strings.NewReader(line+"\n"+strings.Repeat(line, 3)), 3)
	if err == nil || !strings.Contains(err.Error(), "line 5: more than 3 requests") {
		t.Fatalf("err %v", err)
	}
}

// FuzzReadMooncake: no input panics the reader, and every workload it accepts is
// within its bounds, in arrival order.
func FuzzReadMooncake(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}` + "\n" + `{"timestamp": 3.5, "input_length": 10, "output_length": 0}`))
	f.Add([]byte(`{"timestamp": 1e9, "input_length": 131072, "output_length": 0, "hash_ids": []}`))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := ReadMooncake(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		for i, r := range w.Requests {
			n := 0
			for _, s := range r.Prompt {
				n += s.Len
			}
			if r.PromptLen < 1 || n != r.PromptLen || r.PromptLen > MaxMooncakeRequestTokens || r.OutputLen > MaxMooncakeRequestTokens || r.OutputLen < 1 || r.Arrival < 0 {
				t.Fatalf("request %d out of bounds: %+v", i, r)
			}
			if i > 0 && r.Arrival < w.Requests[i-1].Arrival {
				t.Fatal("not in arrival order")
			}
		}
	})
}
