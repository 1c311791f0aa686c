package sqldialect

import "testing"

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		`SELECT 1 WHERE a = $1 OR (b = $1 AND c < $12)`: `SELECT 1 WHERE a = ?1 OR (b = ?1 AND c < ?12)`,
		`SELECT '$' || x, $2`:                           `SELECT '$' || x, ?2`,
		`SELECT 1`:                                      `SELECT 1`,
	} {
		for range 2 { // the second time from the cache
			if got := Rebind(in); got != want {
				t.Errorf("Rebind(%q) = %q, want %q", in, got, want)
			}
		}
	}
}
