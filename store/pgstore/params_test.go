package pgstore

import (
	"bytes"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestArrayParamsEncodeAsSlices: textArray and timeArray encode to the
// same bytes as the slices pgx encodes itself, in both formats, for the
// element types the statements use (NULL and empty arrays too), and with
// no allocation per element.
func TestArrayParamsEncodeAsSlices(t *testing.T) {
	m := pgtype.NewMap()
	loc := time.FixedZone("x", 3600)
	times := []time.Time{time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), time.Date(1999, 12, 31, 23, 59, 59, 999999000, loc), {}}
	strs := []string{"a", "", "ünïcode", "with,comma \"quote\""}
	cases := []struct {
		name      string
		oid       uint32
		plain, as any
	}{
		{"text", pgtype.TextArrayOID, strs, textArray(strs)},
		{"text empty", pgtype.TextArrayOID, []string{}, textArray{}},
		{"text null", pgtype.TextArrayOID, []string(nil), textArray(nil)},
		{"timestamptz", pgtype.TimestamptzArrayOID, times, timeArray(times)},
		{"timestamp", pgtype.TimestampArrayOID, times, timeArray(times)},
		{"timestamptz empty", pgtype.TimestamptzArrayOID, []time.Time{}, timeArray{}},
		{"timestamptz null", pgtype.TimestamptzArrayOID, []time.Time(nil), timeArray(nil)},
	}
	for _, c := range cases {
		for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
			want, err := m.Encode(c.oid, format, c.plain, nil)
			if err != nil {
				t.Fatalf("%s/%d: plain: %v", c.name, format, err)
			}
			got, err := m.Encode(c.oid, format, c.as, nil)
			if err != nil {
				t.Fatalf("%s/%d: %v", c.name, format, err)
			}
			if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
				t.Errorf("%s/%d: encodes to %q, want %q", c.name, format, got, want)
			}
		}
	}
	// Allocations do not grow with the number of elements.
	allocs := func(n int) float64 {
		ss, ts := make(textArray, n), make(timeArray, n)
		for i := range n {
			ss[i], ts[i] = "0123456789abcdef", time.Now()
		}
		buf := make([]byte, 0, 64<<10)
		return testing.AllocsPerRun(20, func() {
			_, _ = m.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, ss, buf[:0])
			_, _ = m.Encode(pgtype.TimestamptzArrayOID, pgtype.BinaryFormatCode, ts, buf[:0])
		})
	}
	if few, many := allocs(10), allocs(1000); many > few {
		t.Errorf("encoding 1000 elements allocates %.0f times, 10 elements %.0f", many, few)
	}
}
