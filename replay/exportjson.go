package replay

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
)

// appendFiniteJSON appends v as encoding/json writes it, but with every
// non-finite float as null. encoding/json refuses NaN and ±Inf, and the log
// can hold them (a producer is free to write any float into a record), so
// one such record would otherwise end a JSON lines export. The jsonlWriter
// uses it only for the rows encoding/json refuses; for any other value it
// writes the same bytes (TestFiniteJSONMatchesEncodingJSON). It reads struct
// fields by their json tags, as the export rows declare them.
func appendFiniteJSON(b []byte, v reflect.Value) ([]byte, error) {
	if v.CanInterface() {
		if _, ok := v.Interface().(json.Marshaler); ok {
			return appendMarshaled(b, v)
		}
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return append(b, "null"...), nil
		}
	case reflect.Pointer:
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		return appendFiniteJSON(b, v.Elem())
	case reflect.Slice:
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i := range v.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendFiniteJSON(b, v.Index(i)); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case reflect.Struct:
		b = append(b, '{')
		first := true
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			key, _ := json.Marshal(name)
			b = append(append(b, key...), ':')
			var err error
			if b, err = appendFiniteJSON(b, v.Field(i)); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return appendMarshaled(b, v)
}

func appendMarshaled(b []byte, v reflect.Value) ([]byte, error) {
	j, err := json.Marshal(v.Interface())
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}
