package sqlitestore

import "testing"

// The hot path's numeric scan destinations accept what database/sql's own
// conversion accepts and refuse the rest with an error.
func TestNumericScanners(t *testing.T) {
	for _, c := range []struct {
		in   any
		want int64
		ok   bool
	}{{int64(42), 42, true}, {int64(-7), -7, true}, {float64(3), 3, true}, {true, 1, true}, {"12", 12, true},
		{[]byte("-5"), -5, true}, {float64(1.5), 0, false}, {"x", 0, false}, {nil, 0, false}} {
		var i int
		var i64 int64
		errI, errI64 := intCol{&i}.Scan(c.in), int64Col{&i64}.Scan(c.in)
		if (errI == nil) != c.ok || (errI64 == nil) != c.ok {
			t.Errorf("Scan(%#v): errors %v, %v; want ok=%v", c.in, errI, errI64, c.ok)
		}
		if c.ok && (int64(i) != c.want || i64 != c.want) {
			t.Errorf("Scan(%#v) = %d, %d; want %d", c.in, i, i64, c.want)
		}
	}
	for _, c := range []struct {
		in   any
		want float64
		ok   bool
	}{{float64(2.5), 2.5, true}, {int64(3), 3, true}, {"0.25", 0.25, true}, {[]byte("1e3"), 1000, true},
		{"x", 0, false}, {nil, 0, false}} {
		var f float64
		err := floatCol{&f}.Scan(c.in)
		if (err == nil) != c.ok || c.ok && f != c.want {
			t.Errorf("floatCol.Scan(%#v) = %v, %v; want %v ok=%v", c.in, f, err, c.want, c.ok)
		}
	}
}
