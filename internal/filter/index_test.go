package filter

import (
	"slices"
	"strings"
	"testing"
)

// TestPayloadIndexSQL: with a payload index (Docs.PayloadIndex), the
// Postgres SQL of == and in on payload paths, and of && and || of them,
// adds a containment of the literal (a number as its double's 15-digit
// decimal) or the marker, before the exact condition; nothing else does,
// nor SQLite.
func TestPayloadIndexSQL(t *testing.T) {
	docs := Docs{Payload: "p", Attrs: "a", PayloadJSON: true, PayloadIndex: "ix(p)", PayloadIndexOther: `{"":1e400}`}
	for src, want := range map[string][]string{
		`payload.a.b == 7`:                          {`{"a":{"b":7}}`},
		`0.1 == payload.a`:                          {`{"a":0.1}`},
		`payload.a == 12345678901234567`:            {`{"a":1.23456789012346e+16}`},
		`payload.a == 1e300`:                        {`{"a":1e+300}`},
		`payload.a == -0.0`:                         {`{"a":-0}`},
		`payload["a b"] == "x<"`:                    {`{"a b":"x\u003c"}`},
		`payload.a == true`:                         {`{"a":true}`},
		`payload.a == null`:                         {`{"a":null}`},
		`payload.a in [1, "x"]`:                     {`{"a":1}`, `{"a":"x"}`},
		`payload.a == 1 && payload.b > 2`:           {`{"a":1}`},
		`has(payload.c) && payload.a == 1`:          {`{"a":1}`},
		`payload.a == 1 && payload.b == "y"`:        {`{"a":1}`, `{"b":"y"}`},
		`payload.a == 1 || payload.b in [false]`:    {`{"a":1}`, `{"b":false}`},
		`payload.a == 1 || payload.b > 2`:           nil,
		`!(payload.a == 1)`:                         nil,
		`payload.a != 1`:                            nil,
		`payload.a >= 1`:                            nil,
		`has(payload.a)`:                            nil,
		`attributes.t == "x"`:                       nil,
		`attributes.t == "x" || payload.a == 1`:     nil,
		`attributes.t == "x" && payload.a.b == 1.5`: {`{"a":{"b":1.5}}`},
	} {
		x, err := Compile(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		var args []any
		sql, ok := x.SQL(Postgres, docs, func(v any) string { args = append(args, v); return "$" })
		if !ok {
			t.Fatalf("%q is outside the SQL subset", src)
		}
		var got []string
		for _, a := range args {
			if s, ok := a.(string); ok && strings.HasPrefix(s, "{") {
				got = append(got, s)
			}
		}
		if want == nil {
			if strings.Contains(sql, "ix(p)") || len(got) > 0 {
				t.Errorf("%q: a containment where none answers: %s %v", src, sql, got)
			}
			continue
		}
		want = append(want, `{"":1e400}`)
		if !slices.Equal(got, want) || !strings.HasPrefix(sql, "((ix(p) @> $::jsonb") && !strings.HasPrefix(sql, "(((ix(p)") {
			t.Errorf("%q: containments %v, want %v; SQL %s", src, got, want, sql)
		}
		if s, _ := x.SQL(SQLite, docs, func(any) string { return "?" }); strings.Contains(s, "ix(p)") {
			t.Errorf("%q: SQLite reads the Postgres index: %s", src, s)
		}
	}
}

// TestPayloadIndexed: PayloadIndexed is true exactly where SQL with a
// payload index adds a containment (the stores split a where over every
// state by it).
func TestPayloadIndexed(t *testing.T) {
	docs := Docs{Payload: "p", Attrs: "a", PayloadJSON: true, PayloadIndex: "ix(p)", PayloadIndexOther: `{"":1e400}`}
	for _, src := range []string{
		`payload.a.b == 7`, `payload.a in [1, "x"]`, `payload.a == 1 && payload.b > 2`, `payload.a == 1 || payload.b in [false]`,
		`payload.a == 1 || payload.b > 2`, `payload.a != 1`, `has(payload.a)`, `attributes.t == "x"`, `!(payload.a == 1)`,
	} {
		x, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		sql, ok := x.SQL(Postgres, docs, func(any) string { return "?" })
		if !ok {
			t.Fatalf("%s: not in SQL", src)
		}
		if got, want := x.PayloadIndexed(), strings.Contains(sql, "ix(p) @>"); got != want {
			t.Errorf("%s: PayloadIndexed %v, the SQL's containment %v", src, got, want)
		}
	}
	if x, err := Compile(`payload.a.exists(v, v == 1)`); err != nil || x.PayloadIndexed() {
		t.Errorf("a where outside SQL is not indexed (%v)", err)
	}
}

// TestPayloadIndexHolds: with Docs.PayloadIndexHolds, the condition goes
// beside every containment SQL adds (the planner proves a partial index's
// predicate from it), and nowhere else.
func TestPayloadIndexHolds(t *testing.T) {
	docs := Docs{Payload: "p", Attrs: "a", PayloadJSON: true, PayloadIndex: "ix(p)", PayloadIndexOther: `{"":1e400}`, PayloadIndexHolds: "holds(p)"}
	for src, want := range map[string]bool{
		`payload.a == 1`: true, `payload.a in [1, 2]`: true, `payload.a == 1 && payload.b > 2`: true,
		`payload.a > 1`: false, `!(payload.a == 1)`: false, `attributes.t == "x"`: false,
	} {
		x, err := Compile(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		sql, ok := x.SQL(Postgres, docs, func(any) string { return "$" })
		if !ok {
			t.Fatalf("%q is outside the SQL subset", src)
		}
		if got := strings.Contains(sql, "::jsonb) AND holds(p) AND "); got != want || strings.Count(sql, "holds(p)") > 1 {
			t.Errorf("%q: holds beside the containment %v, want %v: %s", src, got, want, sql)
		}
	}
}
