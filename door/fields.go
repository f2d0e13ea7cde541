package door

import (
	"encoding/json"
	"slices"
)

// A client's body is forwarded as the client wrote it, with only the few
// top-level fields the exchange needs changed (edits): re-encoding it
// through a map cost a full decode and encode of every body, the prompt's
// token ids included, on every request. The fields the door reads are
// found by a scan of the body's top level, after json.Valid (one pass,
// without allocating) has checked the whole body. A body the scan cannot
// forward exactly as encoding/json reads it (a field the door reads or
// changes given twice, or any key spelled with an escape) is rendered
// through a map instead, as encoding/json reads it: the engine then gets
// the very fields the door decided on.

// The top-level fields the door reads or changes.
const (
	fModel = iota
	fStream
	fStreamOptions
	fMaxTokens
	fMaxCompletionTokens
	fMessages
	fPrompt
	fKVTransfer
	fMinTokens
	fMinCompletionTokens
	nFields
)

var fieldNames = [nFields]string{
	fModel: "model", fStream: "stream", fStreamOptions: "stream_options", fMaxTokens: "max_tokens",
	fMaxCompletionTokens: "max_completion_tokens", fMessages: "messages", fPrompt: "prompt",
	fKVTransfer: fieldKVTransfer, fMinTokens: "min_tokens", fMinCompletionTokens: "min_completion_tokens",
}

// fieldIndexOf is the index of a top-level field the door reads, -1 for
// any other key.
func fieldIndexOf(key string) int {
	for i, n := range fieldNames {
		if n == key {
			return i
		}
	}
	return -1
}

// bodyFields are the fields of a body the door reads: each one's value
// literal (the last one given, as encoding/json reads duplicates), nil
// when absent.
type bodyFields struct {
	raw []byte
	val [nFields][]byte
	// exact: the body can be forwarded by splicing (no field of the door's
	// given twice, no escaped key).
	exact bool
}

// scanBody reads the top-level fields of body, which must be a JSON
// object; ok false when it is not (the caller then says why).
func scanBody(body []byte) (f bodyFields, ok bool) {
	i := skipSpace(body, 0)
	if !json.Valid(body) || body[i] != '{' {
		return f, false
	}
	f.raw, f.exact = body, true
	objectFields(body, i, func(key, v []byte) bool {
		k := string(key) // not allocated: compared, never kept
		if slices.Contains(key, '\\') {
			var s string
			if json.Unmarshal(body[keyStart(body, key):keyEnd(body, key)], &s) != nil {
				s = ""
			}
			k = s
			f.exact = false
		}
		if j := fieldIndexOf(k); j >= 0 {
			if f.val[j] != nil {
				f.exact = false
			}
			f.val[j] = v
		}
		return true
	})
	return f, true
}

// offset is where sub, a sub-slice of b (as objectFields gives keys and
// values), starts in b.
func offset(b, sub []byte) int { return cap(b) - cap(sub) }

// keyStart and keyEnd locate key (without its quotes) with its quotes.
func keyStart(body, key []byte) int { return offset(body, key) - 1 }
func keyEnd(body, key []byte) int   { return offset(body, key) + len(key) + 1 }

// has reports whether field i is given (null included).
func (f *bodyFields) has(i int) bool { return f.val[i] != nil }

// present returns field i when it is given and not null.
func (f *bodyFields) present(i int) ([]byte, bool) {
	v := f.val[i]
	if v == nil || isNull(v) {
		return nil, false
	}
	return v, true
}

// edit changes field i of a body: its value set to value, or removed
// when value is nil.
type edit struct {
	field int
	value []byte
}

// render appends the body with the edits applied to dst: the client's own
// bytes when they change nothing. It copies them even then, so that the
// engine's request never shares the client's buffer.
func (f *bodyFields) render(dst []byte, edits []edit) ([]byte, error) {
	var todo [nFields]bool
	var set [nFields][]byte
	changes := false
	for _, e := range edits {
		if e.value == nil && !f.has(e.field) {
			continue
		}
		todo[e.field], set[e.field] = true, e.value
		changes = true
	}
	if !changes {
		return append(dst, f.raw...), nil
	}
	if !f.exact {
		out, err := f.renderViaMap(edits)
		return append(dst, out...), err
	}
	extra := 0
	for _, e := range edits {
		extra += len(fieldNames[e.field]) + len(e.value) + 4
	}
	out := slices.Grow(dst, len(f.raw)+extra)
	out = append(out, '{')
	n := 0
	member := func(key string, text ...[]byte) {
		if n > 0 {
			out = append(out, ',')
		}
		n++
		if key != "" {
			out = append(out, '"')
			out = append(out, key...)
			out = append(out, '"', ':')
		}
		for _, t := range text {
			out = append(out, t...)
		}
	}
	objectFields(f.raw, skipSpace(f.raw, 0), func(key, v []byte) bool {
		j := fieldIndexOf(string(key))
		switch {
		case j < 0 || !todo[j]:
			member("", f.raw[keyStart(f.raw, key):offset(f.raw, v)+len(v)])
		case set[j] != nil:
			member(fieldNames[j], set[j])
			todo[j] = false
		default:
			todo[j] = false // removed
		}
		return true
	})
	for j := range nFields {
		if todo[j] && set[j] != nil {
			member(fieldNames[j], set[j])
		}
	}
	return append(out, '}'), nil
}

// renderViaMap renders the body through encoding/json, as it reads it.
func (f *bodyFields) renderViaMap(edits []edit) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(f.raw, &fields); err != nil {
		return nil, err
	}
	for _, e := range edits {
		if e.value == nil {
			delete(fields, fieldNames[e.field])
		} else {
			fields[fieldNames[e.field]] = e.value
		}
	}
	return json.Marshal(fields)
}
