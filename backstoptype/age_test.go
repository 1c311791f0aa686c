package backstoptype

import (
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	for s, want := range map[string]time.Duration{"90m": 90 * time.Minute, "7d": 7 * 24 * time.Hour,
		"1d12h": 36 * time.Hour, "0d": 0, "1.5h": 90 * time.Minute} {
		if d, err := ParseAge(s); err != nil || d != want {
			t.Errorf("ParseAge(%q) = %s, %v; want %s", s, d, err, want)
		}
	}
	for _, s := range []string{"", "d", "-1h", "-1d", "1x", "100001d", "1d-1h", "2026-11-27"} {
		if d, err := ParseAge(s); err == nil {
			t.Errorf("ParseAge(%q) = %s, want an error", s, d)
		}
	}
}

func FuzzParseAge(f *testing.F) {
	for _, s := range []string{"7d", "1d12h", "90m", "-1d", "1d-1h", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := ParseAge(s); err == nil && d < 0 {
			t.Fatalf("ParseAge(%q) = %s: negative", s, d)
		}
	})
}
