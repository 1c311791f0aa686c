package redact

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestMask(t *testing.T) {
	m := New(nil)
	for _, c := range []struct{ in, want string }{
		{`{"to":"a@example.com","password":"hunter2"}`, `{"to":"a@example.com","password":"[REDACTED]"}`},
		{`{"user":{"Api-Key":123,"name":"x"},"list":[{"db_password":{"a":1}},{"ok":true}]}`,
			`{"user":{"Api-Key":"[REDACTED]","name":"x"},"list":[{"db_password":"[REDACTED]"},{"ok":true}]}`},
		{`{"Authorization":"Bearer x","clientSecret":["a","b"],"oauth_token":null}`,
			`{"Authorization":"[REDACTED]","clientSecret":"[REDACTED]","oauth_token":"[REDACTED]"}`},
		{`{"n": 1.50, "z": "no secrets", "a": [1, 2]}`, `{"n": 1.50, "z": "no secrets", "a": [1, 2]}`}, // untouched bytes
		{`{"note":"my password is in a value, not a key","b":1}`, `{"note":"my password is in a value, not a key","b":1}`},
		{`[{"token":"t"}, 3]`, `[{"token":"[REDACTED]"},3]`},
		{`"password"`, `"password"`},
		{`{"password": "x"`, `"[REDACTED]"`}, // not JSON: masked whole
		{`{"password": "x"} {}`, `"[REDACTED]"`},
	} {
		if got := string(m.JSON(json.RawMessage(c.in))); got != c.want {
			t.Errorf("JSON(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	deep := strings.Repeat(`{"a":`, MaxDepth+10) + `{"token":1}` + strings.Repeat("}", MaxDepth+10)
	if got := string(m.JSON(json.RawMessage(deep))); got != Mask {
		t.Errorf("too deep: %.80s", got)
	}
}

func TestKeyList(t *testing.T) {
	m := New([]string{"ssn", "!auth", "", "SSN"})
	if !m.Matches("customer_SSN") || !m.Matches("password") || m.Matches("author") || !m.Matches("Authorization") {
		t.Errorf("keys %v: customer_SSN %v password %v author %v Authorization %v", m.Keys(),
			m.Matches("customer_SSN"), m.Matches("password"), m.Matches("author"), m.Matches("Authorization"))
	}
	if len(m.Keys()) != len(DefaultKeys) { // +ssn -auth
		t.Errorf("keys: %v", m.Keys())
	}
	var zero *Masker
	if got := string(zero.JSON(json.RawMessage(`{"password":1}`))); got != `{"password":1}` {
		t.Errorf("nil masker: %s", got)
	}
}

// check: every value under a matching key is the mask.
func leaks(m *Masker, v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if m.Matches(k) {
				if s, ok := val.(string); !ok || s != "[REDACTED]" {
					return true
				}
				continue
			}
			if leaks(m, val) {
				return true
			}
		}
	case []any:
		for _, val := range x {
			if leaks(m, val) {
				return true
			}
		}
	}
	return false
}

func FuzzMask(f *testing.F) {
	for _, s := range []string{`{"password":"x"}`, `{"a":[{"token":{"b":1}}],"c":"d"}`, `[1,"x",null,true]`, `{}`, `"s"`, `{"Api-Key":1e10}`,
		`{"a":{"b":{"c":{"secret":[1,2,3]}}}}`, `{"pass\u0077ord":"x"}`, `not json`, `{"password"`} {
		f.Add([]byte(s))
	}
	m := New([]string{"ssn"})
	f.Fuzz(func(t *testing.T, doc []byte) {
		out := m.JSON(doc)
		if !json.Valid(doc) {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("JSON(%q) = %q: not JSON", doc, out)
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if leaks(m, v) {
			t.Fatalf("JSON(%q) = %q leaks a masked key's value", doc, out)
		}
		if again := m.JSON(out); !bytes.Equal(again, out) && string(out) != Mask {
			t.Fatalf("not idempotent: %q then %q", out, again)
		}
	})
}
