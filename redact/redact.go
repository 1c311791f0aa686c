// Package redact masks secrets in JSON payloads: the value of every object
// key that matches the key list is replaced by "[REDACTED]", at any depth,
// inside arrays too, so the rest of the payload stays readable.
//
// Matching rule: a key matches when, lower-cased and with '-', '_', '.'
// and spaces removed, it CONTAINS one of the (equally normalised) listed
// keys. So with the default list "Authorization", "x-api-key",
// "db_password", "clientSecret" and "oauth_token" all match. Substring
// matching errs on the side of masking: "author" matches "auth" too; drop
// a default key with "!auth" in the list if that is a problem.
//
// The matched value is replaced whatever its type (string, number,
// object, array). Key order and the other values are kept; the output is
// compact JSON. A document that could hold a listed key but cannot be
// walked (not JSON, nested deeper than MaxDepth) is masked whole.
package redact

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// DefaultKeys is the default key list.
var DefaultKeys = []string{"password", "token", "secret", "authorization", "api_key", "credential", "bearer", "auth"}

// Mask is what a matched value becomes.
const Mask = `"[REDACTED]"`

// MaxDepth bounds the nesting the masker walks.
const MaxDepth = 512

// Masker masks payloads by one key list. The zero value masks nothing;
// use New.
type Masker struct {
	keys []string // normalised
}

func normalise(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range strings.ToLower(s) {
		switch r {
		case '-', '_', '.', ' ':
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// New makes a masker for DefaultKeys plus keys; a key written "!k" removes
// k from the defaults instead. Empty keys are ignored.
func New(keys []string) *Masker {
	drop := map[string]bool{}
	var extra []string
	for _, k := range keys {
		if rest, ok := strings.CutPrefix(k, "!"); ok {
			drop[normalise(rest)] = true
			continue
		}
		extra = append(extra, k)
	}
	m := &Masker{}
	seen := map[string]bool{}
	for _, k := range append(append([]string{}, DefaultKeys...), extra...) {
		n := normalise(k)
		if n == "" || seen[n] || drop[n] {
			continue
		}
		seen[n] = true
		m.keys = append(m.keys, n)
	}
	return m
}

// Keys is the normalised key list in use.
func (m *Masker) Keys() []string { return append([]string{}, m.keys...) }

// Matches reports whether an object key is masked.
func (m *Masker) Matches(key string) bool {
	if m == nil || len(m.keys) == 0 {
		return false
	}
	n := normalise(key)
	for _, k := range m.keys {
		if strings.Contains(n, k) {
			return true
		}
	}
	return false
}

// mayMatch is the fast path: could any key of the document match?
func (m *Masker) mayMatch(doc []byte) bool {
	if bytes.IndexByte(doc, '\\') >= 0 {
		return true // escapes can spell a key: walk the document
	}
	n := normalise(string(doc))
	for _, k := range m.keys {
		if strings.Contains(n, k) {
			return true
		}
	}
	return false
}

// JSON returns doc with the values of matching keys masked. A document
// with nothing to mask comes back as it was (same bytes).
func (m *Masker) JSON(doc json.RawMessage) json.RawMessage {
	if m == nil || len(m.keys) == 0 || len(doc) == 0 || !m.mayMatch(doc) {
		return doc
	}
	var out bytes.Buffer
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	changed, err := m.value(dec, &out, 0)
	if err != nil {
		return json.RawMessage(Mask)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return json.RawMessage(Mask) // trailing data: not one JSON value
	}
	if !changed {
		return doc
	}
	return out.Bytes()
}

// value copies one JSON value from dec to out, masking inside it.
func (m *Masker) value(dec *json.Decoder, out *bytes.Buffer, depth int) (bool, error) {
	if depth > MaxDepth {
		return false, errors.New("redact: nested too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			out.WriteByte('{')
			changed := false
			for i := 0; dec.More(); i++ {
				kt, err := dec.Token()
				if err != nil {
					return false, err
				}
				key, ok := kt.(string)
				if !ok {
					return false, errors.New("redact: object key is not a string")
				}
				if i > 0 {
					out.WriteByte(',')
				}
				kb, _ := json.Marshal(key)
				out.Write(kb)
				out.WriteByte(':')
				if m.Matches(key) {
					var skip json.RawMessage
					if err := dec.Decode(&skip); err != nil {
						return false, err
					}
					out.WriteString(Mask)
					changed = true
					continue
				}
				c, err := m.value(dec, out, depth+1)
				if err != nil {
					return false, err
				}
				changed = changed || c
			}
			if _, err := dec.Token(); err != nil { // '}'
				return false, err
			}
			out.WriteByte('}')
			return changed, nil
		case '[':
			out.WriteByte('[')
			changed := false
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				c, err := m.value(dec, out, depth+1)
				if err != nil {
					return false, err
				}
				changed = changed || c
			}
			if _, err := dec.Token(); err != nil { // ']'
				return false, err
			}
			out.WriteByte(']')
			return changed, nil
		}
		return false, errors.New("redact: unexpected delimiter")
	case string:
		b, _ := json.Marshal(t)
		out.Write(b)
	case json.Number:
		out.WriteString(t.String())
	case bool:
		if t {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	}
	return false, nil
}
