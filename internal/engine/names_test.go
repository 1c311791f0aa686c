package engine

import (
	"regexp"
	"strings"
	"testing"
)

// The patterns nameRE and attrKeyRE stand for.
var (
	nameRegexp    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$`)
	attrKeyRegexp = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$`)
)

var nameSeeds = []string{
	"", "a", "A", "0", "_", "-", ".", ":", "a-b", "a_b", "a.b", "a:b", "a b", "a\n", "a\x00",
	"_x", "x_", "-x", ".x", ":x", "q/1", "ünï", "a\xff", "\xffa", "bench-20261121T230953-d61f47",
	strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65),
	strings.Repeat("a", 127), strings.Repeat("a", 128), strings.Repeat("a", 129),
	"Z9", "z@", "a[", "a]", "a\\", "a,b", "a+b", "a~b", "`", "{", "@",
}

func TestNamePatterns(t *testing.T) {
	for _, s := range nameSeeds {
		if got, want := nameRE.MatchString(s), nameRegexp.MatchString(s); got != want {
			t.Errorf("name %q: %v, the regexp says %v", s, got, want)
		}
		if got, want := attrKeyRE.MatchString(s), attrKeyRegexp.MatchString(s); got != want {
			t.Errorf("attribute key %q: %v, the regexp says %v", s, got, want)
		}
	}
	// Every byte as the first and as a later character.
	for c := range 256 {
		for _, s := range []string{string([]byte{byte(c)}), "a" + string([]byte{byte(c)}), "_" + string([]byte{byte(c)})} {
			if nameRE.MatchString(s) != nameRegexp.MatchString(s) || attrKeyRE.MatchString(s) != attrKeyRegexp.MatchString(s) {
				t.Errorf("%q: matchers and regexps disagree", s)
			}
		}
	}
}

func FuzzNamePatterns(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := nameRE.MatchString(s), nameRegexp.MatchString(s); got != want {
			t.Errorf("name %q: %v, the regexp says %v", s, got, want)
		}
		if got, want := attrKeyRE.MatchString(s), attrKeyRegexp.MatchString(s); got != want {
			t.Errorf("attribute key %q: %v, the regexp says %v", s, got, want)
		}
	})
}
