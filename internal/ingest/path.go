package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A Path selects one value in a JSON document: object keys separated by
// dots, each optionally followed by array indexes in brackets, with an
// optional leading "$." (docs/brokers.md, "Ingest"):
//
//	check.id   $.check.id   results[0].sequence   $.a.b[2][0].c
//
// A key is one or more characters other than '.', '[', ']', spaces and
// control characters; an index is a decimal number. At most MaxPathDepth
// steps, MaxPathLen bytes.
type Path struct {
	raw   string
	steps []step
}

type step struct {
	key   string // object key; "" for an index step
	index int
}

// Path limits.
const (
	MaxPathLen   = 256
	MaxPathDepth = 32
)

func (p *Path) String() string { return p.raw }

// ParsePath reads a path; a bad one is an error naming it and why.
func ParsePath(s string) (*Path, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("path %q: %s", s, fmt.Sprintf(format, args...))
	}
	if s == "" {
		return nil, bad("empty")
	}
	if len(s) > MaxPathLen {
		return nil, bad("longer than %d bytes", MaxPathLen)
	}
	if !utf8.ValidString(s) {
		return nil, bad("not valid UTF-8")
	}
	rest := strings.TrimPrefix(s, "$.")
	if rest == "" || rest == "$" || strings.HasPrefix(rest, "$[") {
		return nil, bad("names no field (want e.g. check.id or $.check.id)")
	}
	p := &Path{raw: s}
	for seg := range strings.SplitSeq(rest, ".") {
		key := seg
		var idx string
		if i := strings.IndexByte(seg, '['); i >= 0 {
			key, idx = seg[:i], seg[i:]
		}
		if key == "" {
			return nil, bad("empty key (two dots, a leading or trailing dot, or an index without a key)")
		}
		for _, r := range key {
			if r == ']' || unicode.IsSpace(r) || unicode.IsControl(r) {
				return nil, bad("key %q: character %q not allowed", key, r)
			}
		}
		p.steps = append(p.steps, step{key: key})
		for idx != "" {
			end := strings.IndexByte(idx, ']')
			if idx[0] != '[' || end < 0 {
				return nil, bad("unclosed or stray bracket in %q", seg)
			}
			n, err := strconv.Atoi(idx[1:end])
			if err != nil || n < 0 || idx[1] == '+' || idx[1] == '-' {
				return nil, bad("index %q is not a number", idx[1:end])
			}
			p.steps = append(p.steps, step{index: n})
			idx = idx[end+1:]
		}
		if len(p.steps) > MaxPathDepth {
			return nil, bad("deeper than %d steps", MaxPathDepth)
		}
	}
	return p, nil
}

// Decode reads a message value as JSON (numbers kept as json.Number);
// anything but exactly one JSON value is an error.
func Decode(value []byte) (any, error) {
	if !json.Valid(value) {
		var v any
		err := json.Unmarshal(value, &v) // says where it goes wrong
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	d := json.NewDecoder(bytes.NewReader(value))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	return v, nil
}

// Lookup finds the path's value in a decoded document; ok is false when a
// step is missing (a key absent, an index out of range, or not an object
// or array where the path needs one).
func (p *Path) Lookup(doc any) (v any, ok bool) {
	v = doc
	for _, s := range p.steps {
		switch c := v.(type) {
		case map[string]any:
			if s.key == "" {
				return nil, false
			}
			if v, ok = c[s.key]; !ok {
				return nil, false
			}
		case []any:
			if s.key != "" || s.index >= len(c) {
				return nil, false
			}
			v = c[s.index]
		default:
			return nil, false
		}
	}
	return v, true
}

// Text is the path's value as text: a string as it is, a number as its
// JSON text. Another type, or no value, is an error naming the path.
func (p *Path) Text(doc any) (string, error) {
	v, ok := p.Lookup(doc)
	if !ok {
		return "", fmt.Errorf("field %s is missing", p.raw)
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case nil:
		return "", fmt.Errorf("field %s is null", p.raw)
	}
	return "", fmt.Errorf("field %s is a %s, not a string or number", p.raw, typeName(v))
}

// Int is the path's value as an integer: a JSON integer, or a string
// holding one (e.g. "1700000000000").
func (p *Path) Int(doc any) (int64, error) {
	v, ok := p.Lookup(doc)
	if !ok {
		return 0, fmt.Errorf("field %s is missing", p.raw)
	}
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		return 0, fmt.Errorf("field %s is a %s, not an integer", p.raw, typeName(v))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field %s: %q is not a 64-bit integer", p.raw, s)
	}
	return n, nil
}

func typeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
