package filter

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// TestNumberModel: the Go path reads every number as the nearest double,
// out-of-range ones as ±Inf (the payload is not refused whole), and
// compares literals as doubles: the answers the SQL of both stores gives
// (store/storetest WhereNumbers).
func TestNumberModel(t *testing.T) {
	for _, c := range []struct {
		where, payload string
		match          bool
	}{
		{`payload.amount == 9007199254740993`, `{"amount":9007199254740993}`, true},
		{`payload.amount == 9007199254740993`, `{"amount":9007199254740992}`, true},
		{`payload.amount > 9007199254740992`, `{"amount":9007199254740993}`, false},
		{`payload.f == 1`, `{"f":1.0000000000000001}`, true},
		{`payload.f > 1`, `{"f":1.0000000000000001}`, false},
		{`payload.amount > 1.0`, `{"amount":1e400}`, true},
		{`payload.amount < -1.0`, `{"amount":-1e400}`, true},
		{`payload.amount == 0`, `{"amount":1e-400}`, true},
		{`payload.other == 2`, `{"amount":1e400,"other":2}`, true},
		{`payload.n == 18446744073709551615u`, `{"n":18446744073709551616}`, true},
	} {
		x, err := Compile(c.where)
		if err != nil {
			t.Fatal(err)
		}
		if got := x.Match([]byte(c.payload), nil); got != c.match {
			t.Errorf("%s on %s: %v, want %v", c.where, c.payload, got, c.match)
		}
		if !x.InSQL() {
			t.Errorf("%s: not in the SQL subset", c.where)
		}
	}
}

// checkBounds: the decimals numBounds gives for f are the edges of what
// rounds to f: each rounds to f exactly when closed, and the next decimal
// inward always does.
func checkBounds(t *testing.T, f float64) {
	t.Helper()
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return
	}
	lo, hi, closed := numBounds(f)
	for _, b := range []string{lo, hi} {
		g, _ := strconv.ParseFloat(b, 64)
		if (g == f) != closed {
			t.Fatalf("%v: bound %s parses to %v, closed %v", f, b, g, closed)
		}
	}
	inward := func(b string, dir int) float64 {
		r, _ := new(big.Rat).SetString(b)
		eps := new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Lsh(big.NewInt(1), 1200))
		if dir < 0 {
			eps.Neg(eps)
		}
		g, _ := strconv.ParseFloat(r.Add(r, eps).FloatString(1300), 64)
		return g
	}
	if g := inward(lo, 1); g != f {
		t.Fatalf("%v: just above lo %s parses to %v", f, lo, g)
	}
	if g := inward(hi, -1); g != f {
		t.Fatalf("%v: just below hi %s parses to %v", f, hi, g)
	}
}

func TestNumBounds(t *testing.T) {
	for _, f := range []float64{0, 1, -1, 1.5, 0.1, 9007199254740992, 9007199254740994, math.MaxFloat64, -math.MaxFloat64,
		math.SmallestNonzeroFloat64, 2.2250738585072014e-308, 1e23, 1e308, 4, 1 << 62} {
		checkBounds(t, f)
	}
}

// FuzzNumBounds: any double's bounds are exact.
func FuzzNumBounds(f *testing.F) {
	for _, s := range []uint64{0, math.Float64bits(1), math.Float64bits(math.MaxFloat64), 1, math.Float64bits(0.1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, bits uint64) { checkBounds(t, math.Float64frombits(bits)) })
}

// FuzzDecodePayload: every valid JSON document decodes for the Go path
// (1e400 included, as +Inf), each number as strconv reads it.
func FuzzDecodePayload(f *testing.F) {
	for _, s := range []string{`{"a":1e400}`, `[1e-400,-1e400,1]`, `9007199254740993`, `{"a":{"b":[1.0000000000000001]}}`, `"x"`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			return
		}
		v, err := decodePayload(json.RawMessage(s))
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var top any
		_ = d.Decode(&top)
		if n, ok := top.(json.Number); ok {
			want, _ := strconv.ParseFloat(string(n), 64)
			if got, ok := v.(float64); !ok || got != want {
				t.Fatalf("%q: %v, want %v", s, v, want)
			}
		}
	})
}
