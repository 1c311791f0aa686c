package execworker_test

import (
	"fmt"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/execworker"
)

// FuzzParseProgress: a progress line is N/M with 0 <= N <= M and M >= 1,
// and what is accepted prints back as the same numbers.
func FuzzParseProgress(f *testing.F) {
	for _, s := range []string{"2/5", " 0 / 1 ", "5/5", "6/5", "-1/5", "1/0", "0/0", "1/", "/5", "a/b", "1/2/3", "", "99999999999999999999/1", "3/5\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := execworker.ParseProgress(s)
		if !ok {
			if p != (backstop.Progress{}) {
				t.Fatalf("%q: refused but returned %+v", s, p)
			}
			return
		}
		if p.Completed < 0 || p.Total < 1 || p.Completed > p.Total {
			t.Fatalf("%q: accepted %+v", s, p)
		}
		if q, ok := execworker.ParseProgress(fmt.Sprintf("%d/%d", p.Completed, p.Total)); !ok || q != p {
			t.Fatalf("%q: %+v does not round-trip (%+v)", s, p, q)
		}
	})
}

func TestParseProgress(t *testing.T) {
	for s, want := range map[string]bool{"2/5": true, " 0 / 1 ": true, "5/5": true, "3/5\r": true,
		"6/5": false, "-1/5": false, "1/0": false, "0/0": false, "x": false, "1/2/3": false} {
		if _, ok := execworker.ParseProgress(s); ok != want {
			t.Errorf("ParseProgress(%q) ok = %v, want %v", s, ok, want)
		}
	}
}
