package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/pdrouter/pdrouter/decider"
)

// Difference is one field whose value is not the same on both sides of a
// check. Values are JSON, exactly as the decider's canonical encoding writes
// them, so that a float is compared and shown with every digit it has.
type Difference struct {
	// Field is a path into the decision's canonical JSON:
	// "mode", "eff_isl_check.value", "candidates[decode-1].cost".
	Field string `json:"field"`
	// Worker is set for a candidate row's field.
	Worker string `json:"worker,omitempty"`
	// Record is the value in the record, Other the recomputed or rebuilt one.
	Record json.RawMessage `json:"record,omitempty"`
	Other  json.RawMessage `json:"other,omitempty"`
	// Cause says why the values differ, as far as the check can tell.
	Cause string `json:"cause"`
}

// Compare compares two decisions in the decider's canonical encoding,
// field by field. Byte equality of the encodings is the definition of
// "identical" (decider.Decision.AppendCanonicalJSON is the byte-identical
// form the decider documents), and the walk only runs to name what differs.
// Candidate rows are matched by worker and pool, not by position, so a
// missing or extra row is reported once rather than shifting every row
// after it.
func Compare(record, other *decider.Decision) []Difference {
	a, b := record.AppendCanonicalJSON(nil), other.AppendCanonicalJSON(nil)
	if bytes.Equal(a, b) {
		return []Difference{}
	}
	va, vb := parseOrdered(a), parseOrdered(b)
	var out []Difference
	diffValue("", va, vb, &out)
	if len(out) == 0 {
		// Equal values in unequal bytes (cannot happen with one encoder):
		// still say so rather than claim identity.
		out = append(out, Difference{Field: "", Record: a, Other: b, Cause: "the canonical encodings differ"})
	}
	return out
}

// node is a parsed JSON value that keeps object key order and the raw text
// of scalars.
type node struct {
	keys []string
	obj  map[string]*node
	arr  []*node
	raw  json.RawMessage // scalars
}

func parseOrdered(b []byte) *node {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	n, _ := parseNode(dec)
	return n
}

func parseNode(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			n := &node{obj: map[string]*node{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := parseNode(dec)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k)
				n.obj[k] = v
			}
			_, err := dec.Token()
			return n, err
		}
		n := &node{arr: []*node{}}
		for dec.More() {
			v, err := parseNode(dec)
			if err != nil {
				return nil, err
			}
			n.arr = append(n.arr, v)
		}
		_, err := dec.Token()
		return n, err
	case nil:
		return &node{raw: json.RawMessage("null")}, nil
	default:
		b, _ := json.Marshal(t)
		return &node{raw: b}, nil
	}
}

// rawOf renders a node back to compact JSON.
func rawOf(n *node) json.RawMessage {
	if n == nil {
		return nil
	}
	if n.raw != nil {
		return n.raw
	}
	var b bytes.Buffer
	if n.obj != nil {
		b.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			b.Write(rawOf(n.obj[k]))
		}
		b.WriteByte('}')
		return b.Bytes()
	}
	b.WriteByte('[')
	for i, e := range n.arr {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(rawOf(e))
	}
	b.WriteByte(']')
	return b.Bytes()
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func diffValue(path string, a, b *node, out *[]Difference) {
	switch {
	case a == nil || b == nil:
		*out = append(*out, Difference{Field: path, Record: rawOf(a), Other: rawOf(b)})
	case a.obj != nil && b.obj != nil:
		for _, k := range a.keys {
			if k == "candidates" && path == "" {
				diffCandidates(a.obj[k], b.obj[k], out)
				continue
			}
			diffValue(join(path, k), a.obj[k], b.obj[k], out)
		}
		for _, k := range b.keys {
			if _, ok := a.obj[k]; !ok {
				*out = append(*out, Difference{Field: join(path, k), Other: rawOf(b.obj[k])})
			}
		}
	case a.arr != nil && b.arr != nil:
		for i := 0; i < max(len(a.arr), len(b.arr)); i++ {
			var x, y *node
			if i < len(a.arr) {
				x = a.arr[i]
			}
			if i < len(b.arr) {
				y = b.arr[i]
			}
			diffValue(fmt.Sprintf("%s[%d]", path, i), x, y, out)
		}
	default:
		if !bytes.Equal(rawOf(a), rawOf(b)) {
			*out = append(*out, Difference{Field: path, Record: rawOf(a), Other: rawOf(b)})
		}
	}
}

// rowKey names a candidate row: "worker" for decode rows, "worker@prefill"
// for prefill rows (a worker id is in one pool, but a table could list one
// id in both after a re-registration, and the key must stay unique).
func rowKey(n *node) (key, worker string) {
	var w, p string
	if n != nil && n.obj != nil {
		_ = json.Unmarshal(rawOf(n.obj["worker"]), &w)
		_ = json.Unmarshal(rawOf(n.obj["pool"]), &p)
	}
	if p == string(decider.PoolPrefill) {
		return w + "@prefill", w
	}
	return w, w
}

func diffCandidates(a, b *node, out *[]Difference) {
	type row struct {
		n      *node
		worker string
	}
	index := func(n *node) (map[string]row, []string) {
		m := map[string]row{}
		var order []string
		if n == nil {
			return m, order
		}
		for _, e := range n.arr {
			k, w := rowKey(e)
			if _, dup := m[k]; dup {
				k = fmt.Sprintf("%s#%d", k, len(order))
			}
			m[k] = row{e, w}
			order = append(order, k)
		}
		return m, order
	}
	ma, oa := index(a)
	mb, ob := index(b)
	for _, k := range oa {
		ra := ma[k]
		rb, ok := mb[k]
		path := "candidates[" + k + "]"
		if !ok {
			*out = append(*out, Difference{Field: path, Worker: ra.worker, Record: rawOf(ra.n), Cause: ""})
			continue
		}
		start := len(*out)
		diffValue(path, ra.n, rb.n, out)
		for i := start; i < len(*out); i++ {
			(*out)[i].Worker = ra.worker
		}
	}
	var extra []string
	for _, k := range ob {
		if _, ok := ma[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		*out = append(*out, Difference{Field: "candidates[" + k + "]", Worker: mb[k].worker, Other: rawOf(mb[k].n)})
	}
}

// leafName is the last component of a difference path: "cost" for
// "candidates[decode-1].cost", "value" for "eff_isl_check.value".
func leafName(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[i+1:]
	}
	return path
}
