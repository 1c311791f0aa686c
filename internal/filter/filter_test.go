package filter

import (
	"strconv"
	"strings"
	"testing"

	"github.com/backstophq/backstop/redact"
)

func TestCompileErrors(t *testing.T) {
	for src, want := range map[string]string{
		``:                          "is empty",
		`payload.a ==`:              "1:13",
		`payload.a`:                 "not bool",
		`1 + 2`:                     "not bool",
		`attributes.tenant == 42`:   "no matching overload",
		`nope == 1`:                 "undeclared reference",
		strings.Repeat("x", 5000):   "more than",
		`payload.a == 1 && (`:       "Syntax error",
		`payload.a.exists(x, x ==)`: "Syntax error",
	} {
		_, err := Compile(src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%.40q) = %v, want an error containing %q", src, err, want)
		}
	}
}

func TestMatchAndSubset(t *testing.T) {
	p := []byte(`{"customer":{"id":42,"name":"Ann"},"tags":["vip"],"n":null}`)
	attrs := map[string]string{"tenant": "acme"}
	for src, c := range map[string]struct{ match, sql bool }{
		`payload.customer.id == 42 && attributes.tenant == "acme"`: {true, true},
		`payload.customer.id == 42.0`:                              {true, true},
		`payload.customer.id > 41 && payload.customer.id <= 42u`:   {true, true},
		`payload["customer"]["name"] in ["Bob", "Ann"]`:            {true, true},
		`has(payload.customer.name) && !has(payload.customer.zip)`: {true, true},
		`payload.n == null`:                          {true, true},
		`payload.missing == 1`:                       {false, true},
		`!(payload.missing == 1)`:                    {false, true},
		`payload.missing == 1 || true`:               {true, false},
		`payload.customer.name < 5`:                  {false, true},
		`payload.customer.name == 5`:                 {false, true},
		`payload.tags.exists(t, t == "vip")`:         {true, false},
		`payload.customer.id == payload.customer.id`: {true, false},
		`payload.tags[0] == "vip"`:                   {true, false},
		`payload["0"] == 1`:                          {false, false},
	} {
		x, err := Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got := x.Match(p, attrs); got != c.match {
			t.Errorf("%s: Match = %v, want %v", src, got, c.match)
		}
		if x.InSQL() != c.sql {
			t.Errorf("%s: InSQL = %v, want %v", src, x.InSQL(), c.sql)
		}
	}
}

func TestMaskedRef(t *testing.T) {
	m := redact.New([]string{"ssn"})
	for src, want := range map[string]string{
		`payload.customer.id == 1`:                             "",
		`payload.customer.ssn == "1"`:                          "ssn",
		`payload["api_key"] == "k"`:                            "api_key",
		`payload.items.exists(i, i.password == "x")`:           "password",
		`payload.customer == {"ssn": "1"}`:                     "ssn",
		`payload.customer.exists(k, payload.customer[k] == 1)`: "*",
		`attributes.auth == "x"`:                               "", // attributes are not masked
	} {
		x, err := Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		got, ok := x.MaskedRef(m.Matches)
		if got != want || ok != (want != "") {
			t.Errorf("%s: MaskedRef = %q, %v; want %q", src, got, ok, want)
		}
	}
}

// FuzzCompile: no expression panics the compiler, the translation or the
// evaluation; the SQL of both dialects is produced for the subset.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{`payload.a == 1`, `has(payload.a.b) || !(payload["x"] in [1, "a", null])`,
		`attributes.t == "x" && payload.a.b < 2.5`, `payload.a.exists(x, x > 1)`, `payload`, `payload.a[0]`, `-1 < payload.q`,
		`payload.a == 1 || payload.b > 2`, `payload.a in [1, "x"] && !(payload.b == null)`} {
		f.Add(s, []byte(`{"a":{"b":1},"x":"a","q":[1]}`))
	}
	f.Fuzz(func(t *testing.T, src string, payload []byte) {
		x, err := Compile(src)
		if err != nil {
			return
		}
		x.Match(payload, map[string]string{"t": "x"})
		x.MaskedRef(func(string) bool { return false })
		for _, d := range []Dialect{SQLite, Postgres} {
			for _, docs := range []Docs{{Payload: "p", Attrs: "a"}, {Payload: "p", Attrs: "a", PayloadIndex: "ix(p)", PayloadIndexOther: "{}"}} {
				// Each parameter is used in the SQL (\x01 is no character
				// of a path).
				n := 0
				sql, ok := x.SQL(d, docs, func(any) string { n++; return "\x01" + strconv.Itoa(n) + "\x01" })
				if ok != x.InSQL() || (ok && sql == "") {
					t.Fatalf("%q: SQL ok=%v InSQL=%v sql=%q", src, ok, x.InSQL(), sql)
				}
				for i := 1; i <= n; i++ {
					if !strings.Contains(sql, "\x01"+strconv.Itoa(i)+"\x01") {
						t.Fatalf("%q: parameter %d is not in the SQL %q", src, i, sql)
					}
				}
			}
		}
	})
}
