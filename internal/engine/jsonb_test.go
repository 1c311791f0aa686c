package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testdb"
)

// jsonbCases: documents with the answer PostgreSQL 15 gives to ::jsonb
// (checked against the server by TestJSONBMatchesPostgres), and the
// message's path where refused.
var jsonbCases = []struct {
	doc  string
	path string // "" when jsonb holds it
}{
	{`{"a":"\udc00"}`, "payload.a"},
	{`{"a":"\ud800"}`, "payload.a"},
	{`{"a":"x\ud800\u0041"}`, "payload.a"},
	{`{"a":"\udc00\ud800"}`, "payload.a"},
	{`{"a":"\u0000"}`, "payload.a"},
	{`{"amount":1e200000}`, "payload.amount"},
	{`{"a":[1,{"b-c":[0,-1e131072]}]}`, `payload.a[1]["b-c"][1]`},
	{`{"\udc00":1}`, "payload"},
	{`{"o":{"k\u0000":1}}`, "payload.o"},
	{`"\u0000"`, "payload"},
	{`1e-16384`, "payload"},
	{`1.5e-16383`, "payload"},
	{`0e-16384`, "payload"},
	{`-0.0e-16383`, "payload"},
	{`0e1073741823`, "payload"},
	{`1e-1073741822`, "payload"},
	{`1e00000000000000000000000000000000000000000000000131072`, "payload"},
	{`1.` + strings.Repeat("0", 16384), "payload"},
	{`1` + strings.Repeat("0", 131072), "payload"},
	// Held:
	{`{"a":"\ud800\udc00","b":"\\u0000","c":"\\udc00"}`, ""},
	{`{"a":1e131071,"b":0.1e131072,"c":9.99e131071,"d":1E+131071}`, ""},
	{`[1e-16383,0e200000,0e1073741822,1e400,-0,0.0]`, ""},
	{`1.` + strings.Repeat("0", 16383), ""},
	{`1` + strings.Repeat("0", 131071), ""},
	{`1e0000000000000000000000000000001`, ""},
	{`123.456e-16380`, ""},
	{`{"":{"\"":[true,false,null,{}, []]}}`, ""},
}

// nested is a document with depth arrays and objects one inside another.
func nested(depth int) string {
	return strings.Repeat(`{"a":[`, depth/2) + strings.Repeat("[", depth%2) + "1" +
		strings.Repeat("]", depth%2) + strings.Repeat("]}", depth/2)
}

// nestedTooDeep: the one refusal that is SQLite's, not jsonb's.
func nestedTooDeep(err error) bool {
	return err != nil && strings.Contains(err.Error(), "nested more than")
}

func TestJSONBProblem(t *testing.T) {
	t.Parallel()
	if err := CheckJSON("payload", []byte(nested(1000))); err != nil {
		t.Errorf("1000 deep: %v", err)
	}
	err := CheckJSON("payload", []byte(nested(1001)))
	if want := ".a[0].a[0] is nested more than 1000"; !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) ||
		!strings.HasPrefix(err.Error(), "payload: the value at payload.a[0]") || !strings.Contains(err.Error(), "…") || len(err.Error()) > 300 {
		t.Errorf("1001 deep: %v, want %q, briefly", err, want)
	}
	for _, c := range jsonbCases {
		err := CheckJSON("payload", []byte(c.doc))
		short := c.doc[:min(len(c.doc), 60)]
		if c.path == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", short, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) || ve.Field != "payload" {
			t.Errorf("%s: got %v, want a validation error on payload", short, err)
			continue
		}
		if !strings.Contains(ve.Message, " "+c.path+" ") && !strings.Contains(ve.Message, " "+c.path+",") {
			t.Errorf("%s: %q does not name the path %s", short, ve.Message, c.path)
		}
		if !strings.Contains(ve.Message, "jsonb") || len(ve.Message) > 300 {
			t.Errorf("%s: message %q: want the reason, briefly", short, ve.Message)
		}
	}
}

// FuzzJSONB: the check never panics on valid JSON, refuses invalid JSON,
// and what it accepts decodes to strings without NUL; with Postgres at
// hand (BACKSTOP_TEST_POSTGRES_URL), its answer is the server's.
func FuzzJSONB(f *testing.F) {
	for _, c := range jsonbCases {
		if len(c.doc) < 1000 {
			f.Add([]byte(c.doc))
		}
	}
	for _, s := range []string{`{"a":"\ud800\u`, `1e`, `"\u00`, `[`, `{"a":1e2147483648}`, `-`, `0.`} {
		f.Add([]byte(s))
	}
	pg := jsonbServer(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		err := CheckJSON("payload", b)
		if !utf8.Valid(b) || !json.Valid(b) {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: not valid JSON, got %v", b, err)
			}
			return
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("%q: %v is not a validation error", b, err)
		}
		if err == nil {
			v, derr := decodeJSON(b) // numbers as json.Number: 1e400 is jsonb's, not float64's
			if derr != nil || strings.Contains(fmt.Sprint(v), "\x00") {
				t.Fatalf("%q: accepted, but decodes to a NUL", b)
			}
		}
		if pg != nil {
			if held := pg(t, []string{string(b)})[0]; held != (err == nil) && !(held && nestedTooDeep(err)) {
				t.Fatalf("%q: PostgreSQL's jsonb holds it: %t; the check: %v", b, held, err)
			}
		}
	})
}

// TestJSONBMatchesPostgres: on a corpus of numbers around the numeric
// type's bounds and of strings with escapes, the check accepts exactly
// what PostgreSQL's ::jsonb accepts.
func TestJSONBMatchesPostgres(t *testing.T) {
	t.Parallel()
	pg := jsonbServer(t)
	if pg == nil {
		t.Skip("needs PostgreSQL")
	}
	r := rand.New(rand.NewPCG(1, 2))
	digits := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		return b.String()
	}
	near := func(edge int) int { return edge + r.IntN(9) - 4 }
	var docs []string
	for range 600 {
		var num string
		switch r.IntN(6) {
		case 0: // an exponent near the weight bound
			num = digits(1+r.IntN(3)) + "e" + fmt.Sprint(near(131072-r.IntN(3)))
		case 1: // a negative exponent near the scale bound
			num = digits(1+r.IntN(2)) + "." + digits(r.IntN(3)) + "e-" + fmt.Sprint(near(16383))
		case 2: // digits near the scale bound
			num = "0." + digits(near(16383))
		case 3: // digits near the weight bound
			num = fmt.Sprint(1+r.IntN(9)) + digits(near(131071))
		case 4: // exponents near INT_MAX/2
			num = "0." + digits(r.IntN(2)) + "e" + []string{"", "-", "+"}[r.IntN(3)] + fmt.Sprint(near(1073741823))
		default: // zeros with exponents
			num = "0" + []string{"", ".0", ".00"}[r.IntN(3)] + "e" + []string{"", "-"}[r.IntN(2)] + fmt.Sprint(near(16383+r.IntN(2)*115000))
		}
		if r.IntN(2) == 0 {
			num = "-" + num
		}
		docs = append(docs, `{"n":`+num+`}`)
	}
	units := []string{`\u0000`, `\ud800`, `\udbff`, `\udc00`, `\udfff`, `\u0041`, `\ufffd`, `\u00e9`, `x`, `\\`, `\"`, `\n`}
	for range 600 {
		var b strings.Builder
		for range 1 + r.IntN(4) {
			b.WriteString(units[r.IntN(len(units))])
		}
		if r.IntN(2) == 0 {
			docs = append(docs, `{"s":"`+b.String()+`"}`)
		} else {
			docs = append(docs, `{"`+b.String()+`":1}`)
		}
	}
	for _, c := range jsonbCases {
		docs = append(docs, c.doc)
	}
	docs = append(docs, nested(1000), nested(1001)) // jsonb holds both; the second is SQLite's refusal
	held := pg(t, docs)
	for i, d := range docs {
		err := CheckJSON("payload", []byte(d))
		if held[i] != (err == nil) && !(held[i] && nestedTooDeep(err)) {
			t.Errorf("%.80s: PostgreSQL's jsonb holds it: %t; the check: %v", d, held[i], err)
		}
	}
}

// jsonbServer returns a function asking PostgreSQL which documents ::jsonb
// accepts; nil without a server (a skip in tests, unless Postgres is
// required).
func jsonbServer(tb testing.TB) func(testing.TB, []string) []bool {
	if os.Getenv(testdb.EnvPostgresURL) == "" && os.Getenv(testdb.EnvRequirePostgres) != "1" {
		return nil
	}
	url := testdb.Postgres(tb)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `CREATE FUNCTION jsonb_holds(d text) RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN PERFORM d::jsonb; RETURN true; EXCEPTION WHEN others THEN RETURN false; END $$`); err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex // a fuzz worker's inputs arrive one at a time; the connection is not shared otherwise
	return func(t testing.TB, docs []string) []bool {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var held []bool
		if err := conn.QueryRow(ctx, `SELECT array_agg(jsonb_holds(d) ORDER BY i) FROM unnest($1::text[]) WITH ORDINALITY AS u(d, i)`,
			docs).Scan(&held); err != nil {
			t.Fatal(err)
		}
		return held
	}
}

// decodeJSON decodes b with numbers as json.Number.
func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
