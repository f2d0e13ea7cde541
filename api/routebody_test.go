package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// routeBodyAttacks are bodies built to make the parsers disagree or work
// hard: duplicate keys (plain, escaped, nested), keys that match a field
// only case-insensitively, oversized after vectors, deep nesting.
var routeBodyAttacks = []string{
	// Keys longer than an error's field may carry, unknown and repeated.
	`{"` + strings.Repeat("x", 400) + `":null}`,
	`{"` + strings.Repeat("y", 400) + `":1,"` + strings.Repeat("y", 400) + `":1}`,
	`{"token_ids":[1],"token_ids":[2]}`,
	`{"token_ids":[1],"token_\u0069ds":[2]}`,
	`{"model":"a","Model":"b","token_ids":[1]}`,
	`{"TOKEN_IDS":[1]}`,
	`{"token_ids":[1],"after":{"load":{"0":1},"lo\u0061d":{"1":1}}}`,
	`{"token_ids":[1],"after":{"load":{"00":1,"0":2,"00":3}}}`,
	`{"token_ids":[1],"after":{"load":{"0":9223372036854775807}}}`,
	`{"token_ids":[1],"after":{"load":{"0":1}},"after":null}`,
	`{"token_ids":[{"a":1,"a":2}]}`,
	`{"token_ids":[1],"lora_name":null,"lora_name":"x"}`,
	"{\"token_ids\":[1],\"\xff\":1,\"\xfe\":2}",
	`{"prompt_tokens":-5,"block_hashes":[1],"block_size":16}`,
	`{"token_ids":[]}`,
	`{"token_ids":[1],"after":` + strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat(`}`, 200) + `}`,
	`{"token_ids":` + strings.Repeat(`[`, 20000) + strings.Repeat(`]`, 20000) + `}`,
	manyAfterKeys(2000, 0),
	manyAfterKeys(500, 7),
}

// manyAfterKeys is a route body whose after vector has n partitions, the
// last repeating partition dup (none when dup is 0 and n is small).
func manyAfterKeys(n, dup int) string {
	var b strings.Builder
	b.WriteString(`{"token_ids":[1],"after":{"load":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		p := i
		if i == n-1 && dup > 0 {
			p = dup
		}
		fmt.Fprintf(&b, `"%d":%d`, p, i)
	}
	b.WriteString(`}}}`)
	return b.String()
}

const testMaxAfter = 1024

var reflectTypeOfRouteRequest = reflect.TypeFor[routeRequest]()

// referenceRouteBody is what a route body must decode to, by an
// independent reading: encoding/json's strict decoder, plus a token walk
// that refuses duplicate keys in any object, top-level keys that are not
// exactly a field's name, and more than testMaxAfter entries in nested
// objects (after's topics and partitions).
func referenceRouteBody(raw []byte) (routeRequest, bool) {
	var req routeRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if dec.Decode(&req) != nil {
		return req, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, false
	}
	fields := structFields(reflectTypeOfRouteRequest)
	nested, ok := 0, true
	err := eachKey(json.NewDecoder(bytes.NewReader(raw)), func(depth int, key string, repeated bool) bool {
		switch {
		case repeated:
			ok = false
		case depth == 1:
			_, ok = fields[key]
		default:
			nested++
			ok = nested <= testMaxAfter
		}
		return ok
	})
	return req, ok && errors.Is(err, io.EOF)
}

// checkRouteBody: the route body decoder (fast path, else decodeJSON)
// accepts exactly what the reference accepts, with the same values, and
// the fast path never takes a body the strict decoder would refuse.
func checkRouteBody(t *testing.T, body string) {
	t.Helper()
	checkFastBody(t, body)
	var got routeRequest
	err := decodeRouteBody([]byte(body), testMaxAfter, &got)
	want, ok := referenceRouteBody([]byte(body))
	if (err == nil) != ok {
		t.Fatalf("body %.200q: decoder error %v, reference accepts: %v", body, err, ok)
	}
	if ok && !reflect.DeepEqual(got, want) {
		t.Fatalf("body %.200q:\ngot  %+v\nwant %+v", body, got, want)
	}
	var e *Error
	if err != nil && (!errors.As(err, &e) || len(e.Message) > maxMessageBytes+64 || len(e.Field) > maxFieldBytes+64) {
		t.Fatalf("body %.200q: error %v is not a bounded *Error", body, err)
	}
}

func TestRouteBodyRefusesWhatEncodingJSONTakes(t *testing.T) {
	for _, body := range append(slices.Clone(fastBodySeeds), routeBodyAttacks...) {
		checkRouteBody(t, body)
	}
	checkRefusals(t, func(body []byte) error {
		var req routeRequest
		return decodeRouteBody(body, testMaxAfter, &req)
	}, []refusal{
		{`{"token_ids":[1],"token_ids":[2]}`, "duplicate_key", "token_ids"},
		{`{"token_ids":[1],"token_\u0069ds":[2]}`, "duplicate_key", "token_ids"},
		{`{"TOKEN_IDS":[1]}`, "unknown_field", "TOKEN_IDS"},
		{`{"token_ids":[1],"after":{"load":{"00":1,"0":2,"00":3}}}`, "duplicate_key", "after.load.00"},
		{`{"token_ids":[{"a":1,"a":2}]}`, "duplicate_key", "token_ids[0].a"},
		{manyAfterKeys(2000, 0), "invalid_value", "after"},
		{manyAfterKeys(500, 7), "duplicate_key", "after.load.7"},
	})
}

// TestRouteBodyKeysAreLinear: a body of 3 MB of distinct after keys is
// decoded (by either path) in time linear in its size: under a second
// (a few under the race detector on a loaded machine, hence the generous
// bound), where comparing each key with every earlier one takes minutes.
func TestRouteBodyKeysAreLinear(t *testing.T) {
	const n = 200_000
	body := []byte(manyAfterKeys(n, 0))
	for _, path := range []string{"fast", "encoding/json"} {
		b := body
		if path == "encoding/json" {
			b = bytes.Replace(body, []byte(`"token_ids"`), []byte(`"token_\u0069ds"`), 1)
		}
		start := time.Now()
		var req routeRequest
		err := decodeRouteBody(b, n+1, &req)
		took := time.Since(start)
		if err != nil || len(req.After["load"]) != n {
			t.Fatalf("%s: %v, %d partitions", path, err, len(req.After["load"]))
		}
		t.Logf("%s path: %d after keys (%d KB) in %s", path, n, len(b)>>10, took)
		if took > 20*time.Second {
			t.Fatalf("%s path: %d after keys took %s", path, n, took)
		}
	}
}

func FuzzRouteBody(f *testing.F) {
	for _, s := range append(slices.Clone(fastBodySeeds), routeBodyAttacks...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) { checkRouteBody(t, body) })
}
