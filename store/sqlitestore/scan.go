package sqlitestore

import (
	"fmt"
	"strconv"
)

// Scan destinations for numeric columns on the hot path. database/sql
// converts an int64 into an *int (or any float into a *float64) by
// reflection and by formatting the value as a string and parsing it back;
// a Scanner gets the driver's value after two type switches. These accept
// what database/sql would: integers, floats (REAL) and numeric text.

// intCol scans an INTEGER column into an int.
type intCol struct{ p *int }

func (c intCol) Scan(v any) error {
	n, err := scanInt(v)
	*c.p = int(n)
	return err
}

// int64Col scans an INTEGER column into an int64.
type int64Col struct{ p *int64 }

func (c int64Col) Scan(v any) error {
	n, err := scanInt(v)
	*c.p = n
	return err
}

// floatCol scans a REAL (or INTEGER) column into a float64.
type floatCol struct{ p *float64 }

func (c floatCol) Scan(v any) error {
	switch x := v.(type) {
	case float64:
		*c.p = x
	case int64:
		*c.p = float64(x)
	case string:
		return c.Scan([]byte(x))
	case []byte:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return fmt.Errorf("converting %q to a float: %w", x, err)
		}
		*c.p = f
	default:
		return fmt.Errorf("converting %T to a float is unsupported", v)
	}
	return nil
}

func scanInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case float64:
		if x != float64(int64(x)) {
			return 0, fmt.Errorf("converting %v to an integer loses its fraction", x)
		}
		return int64(x), nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case string:
		return scanInt([]byte(x))
	case []byte:
		n, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("converting %q to an integer: %w", x, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("converting %T to an integer is unsupported", v)
}
