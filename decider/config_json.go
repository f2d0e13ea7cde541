package decider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// disaggFields lists the keys of --router-conditional-disagg-config, in the order the
// error messages print them. It is a function, not a package variable, so that no code
// can change the accepted keys at run time.
func disaggFields() [10]string {
	return [10]string{
		FieldPolicy, FieldEffISLThreshold, FieldEffISLRatioThreshold,
		FieldPrefillBusyThreshold, FieldDecodeBusyThreshold, FieldDecodeBusySource,
		FieldSLOTTFTMs, FieldSLOITLMs, FieldSLOMinSamples, FieldSLOITLGuard,
	}
}

// ParseDisaggConfig parses the JSON of --router-conditional-disagg-config on top of the
// defaults and validates every value.
//
// It walks the object token by token instead of using json.Decoder.DisallowUnknownFields,
// because the latter still matches keys case-insensitively and keeps the last of two
// duplicate keys: "POLICY" or a repeated "policy" would be accepted silently, and a typo
// in a config file is exactly what this check is for. Keys therefore match exactly, a
// duplicate is an error, and anything after the object is an error. A JSON null leaves a
// field at its default (unset, for the optional thresholds).
func ParseDisaggConfig(data []byte) (DisaggConfig, error) {
	cfg := DefaultDisaggConfig()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return cfg, cfgErr("", "is not valid JSON: %v", jsonErr(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return cfg, cfgErr("", "must be a JSON object, like {\"policy\":\"isl_bounding\"}")
	}
	fields := disaggFields()
	var seen [len(fields)]bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return cfg, cfgErr("", "is not valid JSON: %v", jsonErr(err))
		}
		key, _ := tok.(string) // inside an object, encoding/json only yields string keys
		idx := -1
		for i, f := range fields {
			if f == key {
				idx = i
			}
		}
		if idx < 0 {
			return cfg, cfgErr("", "has unknown key %q; valid keys are %s", key, strings.Join(fields[:], ", "))
		}
		if seen[idx] {
			return cfg, cfgErr(key, "appears twice")
		}
		seen[idx] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return cfg, cfgErr(key, "has no valid JSON value: %v", jsonErr(err))
		}
		if err := setDisaggField(&cfg, key, raw); err != nil {
			return cfg, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return cfg, cfgErr("", "is not valid JSON: %v", jsonErr(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return cfg, cfgErr("", "has data after the JSON object")
	}
	return cfg, cfg.Validate()
}

// setDisaggField decodes one value with a message that names the field and its range.
func setDisaggField(cfg *DisaggConfig, key string, raw json.RawMessage) error {
	if string(raw) == "null" {
		return nil
	}
	switch key {
	case FieldPolicy, FieldDecodeBusySource:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return cfgErr(key, "must be a string, got %s", clip(raw))
		}
		if key == FieldPolicy {
			cfg.Policy = Policy(s)
		} else {
			cfg.DecodeBusySource = BusySource(s)
		}
	case FieldSLOITLGuard:
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			return cfgErr(key, "must be true or false, got %s", clip(raw))
		}
		cfg.SLOITLGuard = v
	case FieldEffISLThreshold, FieldSLOMinSamples:
		n, ok := jsonNumber(raw)
		if !ok {
			return cfgErr(key, "must be a number, got %s; %s", clip(raw), validRangeNonNegativeInt64)
		}
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return cfgErr(key, "is %s; %s", n, validRangeNonNegativeInt64)
		}
		if key == FieldSLOMinSamples {
			cfg.SLOMinSamples = v
		} else {
			cfg.EffISLThreshold = v
		}
	case FieldEffISLRatioThreshold, FieldPrefillBusyThreshold, FieldDecodeBusyThreshold, FieldSLOTTFTMs, FieldSLOITLMs:
		n, ok := jsonNumber(raw)
		if !ok {
			return cfgErr(key, "must be a number, got %s", clip(raw))
		}
		v, err := strconv.ParseFloat(n, 64)
		if err != nil || math.IsInf(v, 0) {
			return cfgErr(key, "is %s, which is not a finite number", n)
		}
		switch key {
		case FieldEffISLRatioThreshold:
			cfg.EffISLRatioThreshold = v
		case FieldPrefillBusyThreshold:
			cfg.PrefillBusyThreshold = Some(v)
		case FieldSLOTTFTMs:
			cfg.SLOTTFTMs = v
		case FieldSLOITLMs:
			cfg.SLOITLMs = v
		default:
			cfg.DecodeBusyThreshold = Some(v)
		}
	}
	return nil
}

// jsonNumber returns the literal of a JSON number value.
func jsonNumber(raw json.RawMessage) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return "", false
	}
	n, ok := tok.(json.Number)
	return string(n), ok
}

func cfgErr(field, format string, args ...any) error {
	return &ConfigError{Flag: FlagConditionalDisaggCfg, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// jsonErr strips the "json: " prefix that encoding/json puts on some errors, which reads
// oddly after our own prefix.
func jsonErr(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return "unexpected end of input"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// clip shortens a JSON value quoted in an error message: the message must name the
// problem, not echo a megabyte of input into a log.
func clip(raw []byte) string {
	const max = 40
	if len(raw) <= max {
		return string(raw)
	}
	return string(raw[:max]) + "…"
}
