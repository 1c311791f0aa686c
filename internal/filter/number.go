package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"strconv"
)

// The numeric model, one for the Go path and the SQL of both stores: every
// number, in the payload and in the expression, is the IEEE 754 double
// nearest to it (float64, ties to even), as CEL compares an int literal
// with a double and as JavaScript reads JSON. A payload number beyond the
// double range reads as ±infinity, one too small as 0. So
// 9007199254740993 (2^53+1) and 9007199254740992 are the same number, and
// 1.0000000000000001 equals 1.
//
// SQLite reads a number with json_extract and compares CAST(… AS REAL) with
// the literal as a double. Postgres, whose json numbers convert to float8
// only within its range (1e400 is an error there), compares the exact
// numeric with the interval of decimals that round to the literal's double
// (numBounds), which gives the same answer for every value.

// decodePayload decodes a payload as the Go path sees it: numbers as
// float64, out-of-range ones as ±Inf (encoding/json refuses those).
func decodePayload(raw json.RawMessage) (any, error) {
	var p any
	err := json.Unmarshal(raw, &p)
	var te *json.UnmarshalTypeError
	if err == nil || !errors.As(err, &te) {
		return p, err
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&p); err != nil {
		return nil, err
	}
	return floats(p), nil
}

// floats replaces the json.Numbers in v by their float64 (±Inf or 0 when
// out of range).
func floats(v any) any {
	switch v := v.(type) {
	case json.Number:
		f, _ := strconv.ParseFloat(string(v), 64) // a range error still gives ±Inf or 0
		return f
	case map[string]any:
		for k, x := range v {
			v[k] = floats(x)
		}
	case []any:
		for i, x := range v {
			v[i] = floats(x)
		}
	}
	return v
}

// numBounds is the interval of the reals that round to the finite double f
// (ties to even): from lo to hi, exact decimals, each bound included when
// f's significand is even (a tie rounds to it).
func numBounds(f float64) (lo, hi string, closed bool) {
	x := new(big.Rat).SetFloat64(f)
	below := neighbour(f, math.Inf(-1))
	above := neighbour(f, math.Inf(1))
	half := big.NewRat(1, 2)
	l := new(big.Rat).Mul(new(big.Rat).Add(x, below), half)
	h := new(big.Rat).Mul(new(big.Rat).Add(x, above), half)
	return decimal(l), decimal(h), math.Float64bits(f)&1 == 0
}

// neighbour is the next double after f toward dir, exactly; past the
// largest finite double it is 2^1024 (the rounding boundary to infinity).
func neighbour(f, dir float64) *big.Rat {
	n := math.Nextafter(f, dir)
	if !math.IsInf(n, 0) {
		return new(big.Rat).SetFloat64(n)
	}
	r := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 1024))
	if dir < 0 {
		r.Neg(r)
	}
	return r
}

// decimal writes r, a dyadic rational, exactly in decimal.
func decimal(r *big.Rat) string {
	// A denominator 2^k needs k decimal digits.
	return trimZeros(r.FloatString(r.Denom().BitLen()))
}

func trimZeros(s string) string {
	if !bytes.ContainsRune([]byte(s), '.') {
		return s
	}
	for len(s) > 0 && s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}
