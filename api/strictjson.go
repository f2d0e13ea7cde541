package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/pdrouter/pdrouter/internal/textcut"
)

// encoding/json is lenient where the API must not be: it takes the last of
// duplicate keys (so two parts of a stack can read two different requests
// from one body), and it matches a key to a field case-insensitively
// ("Token_IDs" fills token_ids). checkKeys closes both gaps before
// encoding/json decodes: it walks a body that json.Valid accepted once,
// guided by the type it will be decoded into, and refuses a key seen twice
// in one object (400 duplicate_key) and a key that is not exactly a field's
// name (400 unknown_field). It also bounds the members of objects decoded
// into Go maps, whose number the type does not bound (422 invalid_value).
//
// The walk is linear in the body: keys are compared through a map per
// object, never against each other. Its depth is bounded by json.Valid,
// which refuses nesting deeper than encoding/json's limit.

// keyWalker is one walk of checkKeys.
type keyWalker struct {
	b []byte
	i int
	// mapMembers counts down the members of map-typed objects still
	// allowed; mapLimit is where it started.
	mapMembers, mapLimit int
}

// pathSeg is a JSON path, built only when an error names it.
type pathSeg struct {
	parent *pathSeg
	key    string
	index  int // -1 for a key
}

// field is the path as an error's field: cut to the bound every answer
// keeps, here where it is built, because a key is as long as a client
// makes it.
func (p *pathSeg) field() string { return textcut.Truncate(p.String(), maxFieldBytes) }

func (p *pathSeg) String() string {
	if p == nil {
		return ""
	}
	parent := p.parent.String()
	if p.index >= 0 {
		return parent + "[" + strconv.Itoa(p.index) + "]"
	}
	if parent == "" {
		return p.key
	}
	return parent + "." + p.key
}

// checkKeys checks raw, valid JSON, for decoding into a value of type t
// (checkKeys's doc above). maxMapMembers bounds the members of all objects
// decoded into maps, together.
func checkKeys(raw []byte, t reflect.Type, maxMapMembers int) error {
	w := &keyWalker{b: raw, mapMembers: maxMapMembers, mapLimit: maxMapMembers}
	return w.value(t, nil, nil)
}

func (w *keyWalker) ws() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// value walks one value to be decoded into t (nil: not known, or decoded
// by the type itself; only duplicates are checked inside). inMap is the
// path of the outermost map-typed object around it, nil outside any.
func (w *keyWalker) value(t reflect.Type, path, inMap *pathSeg) error {
	w.ws()
	t = decodedType(t)
	switch w.b[w.i] {
	case '{':
		return w.object(t, path, inMap)
	case '[':
		w.i++
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for n := 0; ; n++ {
			w.ws()
			if w.b[w.i] == ']' {
				w.i++
				return nil
			}
			if n > 0 {
				w.i++ // ','
			}
			if err := w.value(elem, &pathSeg{parent: path, index: n}, inMap); err != nil {
				return err
			}
		}
	case '"':
		w.skipString()
	default: // number, true, false, null
		for w.i < len(w.b) && !strings.ContainsRune(",]} \t\n\r", rune(w.b[w.i])) {
			w.i++
		}
	}
	return nil
}

func (w *keyWalker) object(t reflect.Type, path, inMap *pathSeg) error {
	w.i++ // '{'
	var fields map[string]reflect.Type
	isMap := t != nil && t.Kind() == reflect.Map
	switch {
	case t != nil && t.Kind() == reflect.Struct:
		fields = structFields(t)
	case isMap && inMap == nil:
		inMap = path
		if inMap == nil {
			inMap = &pathSeg{index: -1}
		}
	}
	var seen map[string]struct{}
	for n := 0; ; n++ {
		w.ws()
		if w.b[w.i] == '}' {
			w.i++
			return nil
		}
		if n > 0 {
			w.i++ // ','
			w.ws()
		}
		key := w.key()
		member := &pathSeg{parent: path, key: key, index: -1}
		if _, dup := seen[key]; dup {
			return badRequest("duplicate_key", member.field(), fmt.Sprintf("the key %s appears twice in one object; send it once", quoted(key)))
		}
		if seen == nil {
			seen = make(map[string]struct{}, 8)
		}
		seen[key] = struct{}{}
		var elem reflect.Type
		switch {
		case fields != nil:
			ft, ok := fields[key]
			if !ok {
				return badRequest("unknown_field", member.field(), fmt.Sprintf("unknown field %s (names are case-sensitive); see /openapi.json for the accepted fields", quoted(key)))
			}
			elem = ft
		case isMap:
			if w.mapMembers--; w.mapMembers < 0 {
				return unprocessable("invalid_value", inMap.field(), fmt.Sprintf("more than %d entries; send at most %d", w.mapLimit, w.mapLimit))
			}
			elem = t.Elem()
		}
		w.ws()
		w.i++ // ':'
		if err := w.value(elem, member, inMap); err != nil {
			return err
		}
	}
}

// key reads an object key as encoding/json decodes it.
func (w *keyWalker) key() string {
	start := w.i
	plain := w.skipString()
	raw := w.b[start:w.i]
	if plain {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	_ = json.Unmarshal(raw, &s) // valid: json.Valid passed
	return s
}

// skipString moves past a string and reports whether it is plain ASCII
// without escapes (its bytes are then its value).
func (w *keyWalker) skipString() bool {
	w.i++ // '"'
	plain := true
	for ; w.b[w.i] != '"'; w.i++ {
		switch c := w.b[w.i]; {
		case c == '\\':
			plain = false
			w.i++ // the escaped byte; \uXXXX's digits are plain
		case c >= 0x80:
			plain = false
		}
	}
	w.i++
	return plain
}

// decodedType is the type whose shape the JSON value has for
// encoding/json: pointers are looked through, and a type that decodes
// itself (json.Unmarshaler) is opaque: nil.
func decodedType(t reflect.Type) reflect.Type {
	unmarshaler := reflect.TypeFor[json.Unmarshaler]()
	for t != nil {
		if t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler) {
			return nil
		}
		if t.Kind() != reflect.Pointer {
			return t
		}
		t = t.Elem()
	}
	return nil
}

// fieldsByType caches structFields: the API decodes a handful of types.
var fieldsByType sync.Map // reflect.Type → map[string]reflect.Type

// structFields maps the exact JSON names of t's fields to their types, as
// encoding/json names them (the tag's name, else the Go name; "-" and
// unexported fields are not decoded).
func structFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldsByType.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct:
			for n, ft := range structFields(f.Type) { // promoted fields
				m[n] = ft
			}
			continue
		case name == "":
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldsByType.Store(t, m)
	return m
}
