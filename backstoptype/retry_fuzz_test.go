package backstoptype

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzDuration: a duration in JSON (a Go duration string or nanoseconds)
// either is refused or reads back to itself after being written.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{`"1s"`, `"1h2m3.5s"`, `"-1s"`, `1000`, `-5`, `"1x"`, `""`, `null`, `"9999999999h"`,
		`"2562047h47m16.854775807s"`, `1e3`, `"0"`, `"+5m"`, `"1µs"`, `"\u00b5s"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Duration
		if err := json.Unmarshal(b, &d); err != nil {
			return
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("%s → %d: marshal: %v", b, d, err)
		}
		var again Duration
		if err := json.Unmarshal(out, &again); err != nil || again != d {
			t.Fatalf("%s → %s → %s → %v, %v", b, time.Duration(d), out, time.Duration(again), err)
		}
	})
}

// FuzzParseSchedule: an accepted schedule has no negative or empty entry.
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"1s", "1s,2s", " 1s , 2m ", "", ",", "1s,,2s", "-1s", "1x", "9999999999h", "0s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sched, err := ParseSchedule(s)
		if err != nil {
			return
		}
		if len(sched) == 0 {
			t.Fatalf("%q: empty schedule accepted", s)
		}
		for _, d := range sched {
			if d < 0 {
				t.Fatalf("%q: negative entry %s accepted", s, d)
			}
		}
		p := RetryPolicy{Schedule: sched}
		if err := p.Validate(); err != nil {
			t.Fatalf("%q: parsed schedule %v fails Validate: %v", s, sched, err)
		}
	})
}
