package decider_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
)

// The canonical encoding is valid JSON that encoding/json reads back into an equal
// decision, which encodes to the same bytes. So explain tooling can read records with
// the standard library and re-check them byte for byte.
func TestCanonicalJSONRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for iter := range 200 {
		f := randomFleet(rng, 1+rng.IntN(8), rng.IntN(4))
		dc := mustNew(t, randomConfig(rng))
		d, err := dc.Decide(f.view(nil), &f.req)
		if err != nil {
			continue
		}
		b := d.AppendCanonicalJSON(nil)
		if !json.Valid(b) {
			t.Fatalf("iter %d: invalid JSON %s", iter, b)
		}
		var back decider.Decision
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		if again := back.AppendCanonicalJSON(nil); !bytes.Equal(again, b) {
			t.Fatalf("iter %d: round trip differs:\n%s\n%s", iter, b, again)
		}
		m, err := d.MarshalJSON()
		if err != nil || !bytes.Equal(m, b) {
			t.Fatalf("MarshalJSON differs from AppendCanonicalJSON")
		}
	}
}

// Every exported field of Decision, Candidate and Check appears in the encoding: a field
// added to a struct but forgotten in the hand-written encoder would otherwise be lost
// from the record without anyone noticing.
func TestCanonicalJSONCoversEveryField(t *testing.T) {
	var d decider.Decision
	d.Candidates = []decider.Candidate{{ActiveRequests: 1, RecentLocalPrefill: 1, RecentRequests: 1}} // encoded only when not 0
	d.SLO.Evaluated = true                                                                            // encoded only under slo
	var m map[string]any
	if err := json.Unmarshal(d.AppendCanonicalJSON(nil), &m); err != nil {
		t.Fatal(err)
	}
	check := func(typ reflect.Type, obj map[string]any) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				continue
			}
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if _, ok := obj[tag]; !ok {
				t.Errorf("%s.%s (json %q) missing from the canonical encoding", typ.Name(), f.Name, tag)
			}
		}
		if len(obj) != countExported(typ) {
			t.Errorf("%s: encoding has %d keys, struct has %d exported fields", typ.Name(), len(obj), countExported(typ))
		}
	}
	check(reflect.TypeOf(decider.Decision{}), m)
	check(reflect.TypeOf(decider.Candidate{}), m["candidates"].([]any)[0].(map[string]any))
	check(reflect.TypeOf(decider.SLOPrediction{}), m["slo"].(map[string]any))
	check(reflect.TypeOf(decider.Check{}), m["eff_isl_check"].(map[string]any))
}

func countExported(t reflect.Type) int {
	n := 0
	for i := range t.NumField() {
		if t.Field(i).IsExported() && t.Field(i).Tag.Get("json") != "-" {
			n++
		}
	}
	return n
}

func TestCanonicalJSONEscapesStrings(t *testing.T) {
	d := decider.Decision{RequestID: "a\"b\\c\n\x01\u2028é\xff", DecodeWorker: "w<1>&"}
	b := d.AppendCanonicalJSON(nil)
	if !json.Valid(b) {
		t.Fatalf("invalid JSON: %s", b)
	}
	var back decider.Decision
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.RequestID != "a\"b\\c\n\x01\u2028é\ufffd" || back.DecodeWorker != "w<1>&" {
		t.Fatalf("decoded %q %q", back.RequestID, back.DecodeWorker)
	}
	if !bytes.Contains(b, []byte(`"prefill_worker":null`)) {
		t.Fatalf("empty prefill worker must encode as null: %s", b)
	}
}

func TestCanonicalJSONFloats(t *testing.T) {
	d := decider.Decision{Ratio: 0.1, Distance: -0.0}
	d.Distance = -d.Distance // a real negative zero
	b := string(d.AppendCanonicalJSON(nil))
	if !strings.Contains(b, `"effective_isl_ratio":0.1,`) || !strings.Contains(b, `"distance":0,`) {
		t.Fatalf("floats: %s", b)
	}
}
