package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
)

// hasDuplicateKey reports whether some object of valid JSON raw repeats a
// key (as decoded), by a token walk independent of checkKeys.
func hasDuplicateKey(raw []byte) bool {
	dup := false
	_ = eachKey(json.NewDecoder(bytes.NewReader(raw)), func(_ int, _ string, repeated bool) bool {
		dup = repeated
		return !repeated
	})
	return dup
}

// eachKey walks the tokens of dec and calls visit with each object key, its
// depth (1: a member of the outermost object) and whether its object had it
// already, until visit returns false (then nil) or the tokens end (then the
// decoder's error: io.EOF after a whole value). It is the reference the
// decoders' key checks are tested against, so it shares no code with them.
func eachKey(dec *json.Decoder, visit func(depth int, key string, repeated bool) bool) error {
	type frame struct {
		keys map[string]bool // nil for an array
		next bool            // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if key, ok := tok.(string); ok && top != nil && top.keys != nil && top.next {
			repeated := top.keys[key]
			top.keys[key], top.next = true, false
			if !visit(len(stack), key, repeated) {
				return nil
			}
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, next: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].keys != nil {
			stack[len(stack)-1].next = true // a value ended: a key is next
		}
	}
}

// checkStrictBody: decodeJSON into an ingest body (nested structs,
// pointers, types that decode themselves) accepts only what encoding/json
// accepts, with the same value, and only bodies without duplicate keys;
// every duplicate_key it answers is one.
func checkStrictBody(t *testing.T, body string) {
	t.Helper()
	var got kvBody
	err := decodeJSON([]byte(body), defaultMaxMapMembers, &got)
	dup := json.Valid([]byte(body)) && hasDuplicateKey([]byte(body))
	var e *Error
	switch {
	case err == nil:
		var want kvBody
		dec := json.NewDecoder(bytes.NewReader([]byte(body)))
		dec.DisallowUnknownFields()
		if werr := dec.Decode(&want); werr != nil {
			t.Fatalf("%.200q: accepted, encoding/json refuses: %v", body, werr)
		}
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			t.Fatalf("%.200q: accepted, but holds more than one value", body)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%.200q:\ngot  %+v\nwant %+v", body, got, want)
		}
		if dup {
			t.Fatalf("%.200q: accepted with a duplicate key", body)
		}
	case !errors.As(err, &e):
		t.Fatalf("%.200q: %v is not an *Error", body, err)
	case e.Code == "duplicate_key" && !dup:
		t.Fatalf("%.200q: duplicate_key at %s, but no key repeats", body, e.Field)
	case dup && e.Code != "duplicate_key" && e.Code != "unknown_field":
		// A duplicate comes before a type error: the walk runs first.
		t.Fatalf("%.200q: a duplicate key answered %s", body, e.Code)
	}
}

var strictBodySeeds = []string{
	`{"worker_id":"w","events":[{"type":"stored","block_hashes":[1,"0x2",-3],"token_ids":[1],"block_size":16}]}`,
	`{"worker_id":"w","worker_id":"v"}`,
	`{"worker_id":"w","Worker_ID":"v"}`,
	`{"worker_id":"w","events":[{"type":"stored","type":"removed"}]}`,
	`{"worker_id":"w","events":[{"type":"stored","Type":"removed"}]}`,
	`{"worker_id":"w","events":[{"parent_block_hash":{"a":1,"a":2}}]}`,
	`{"worker_id":"w","events":[{"medium":null,"medium":"GPU"}]}`,
	`{"worker_id":"w","ts":1.5,"dp_rank":3,"events":[]}`,
	`{"worker_id":"\u0077","worker_\u0069d":"w"}`,
	`{"worker_id":"w"} {}`,
	`{"worker_id":"w","events":[{"block_hashes":[{"x":1,"x":1}]}]}`,
	`[{"a":1,"a":2}]`,
	`{"a":{"b":1,"b":2}}`,
}

func TestStrictBodyAgrees(t *testing.T) {
	for _, body := range strictBodySeeds {
		checkStrictBody(t, body)
	}
	checkRefusals(t, func(body []byte) error {
		var b kvBody
		return decodeJSON(body, defaultMaxMapMembers, &b)
	}, []refusal{
		{`{"worker_id":"w","worker_id":"v"}`, "duplicate_key", "worker_id"},
		{`{"worker_id":"w","Worker_ID":"v"}`, "unknown_field", "Worker_ID"},
		{`{"worker_id":"w","events":[{"type":"stored","Type":"removed"}]}`, "unknown_field", "events[0].Type"},
		{`{"worker_id":"w","events":[{"parent_block_hash":{"a":1,"a":2}}]}`, "duplicate_key", "events[0].parent_block_hash.a"},
	})
}

// refusal is a body a decoder must refuse, with the code and field of the
// *Error it must refuse it with.
type refusal struct{ body, code, field string }

// checkRefusals runs decode on each body and checks the refusal's code
// and field.
func checkRefusals(t *testing.T, decode func(body []byte) error, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		err := decode([]byte(c.body))
		var e *Error
		if !errors.As(err, &e) || e.Code != c.code || e.Field != c.field {
			t.Errorf("%.80s: got %v, want %s at %s", c.body, err, c.code, c.field)
		}
	}
}

func FuzzStrictBody(f *testing.F) {
	for _, s := range strictBodySeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) { checkStrictBody(t, body) })
}
