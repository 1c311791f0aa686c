package sqlitestore

import (
	"encoding/json"
	"testing"
)

// appendJSONString writes a JSON string that reads back as json.Marshal's
// does (it leaves <, > and & unescaped), whichever of its paths (plain,
// eight bytes at a time, or escaped) a string takes.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a", "01a2000f-2f4c-7b00-a669-ad168cc17621", `quote"inside-the-8-byte-block`,
		`back\slash in lane 7.`, "ctl\x1fchar-after-eight", "tab\there", "\x7f del is plain", "é non-ascii",
		"01234567\x00", "0123456789abcdef\"", "\xff\xfe", "<html>&", "\u2028 separator"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got := appendJSONString([]byte("x"), s)
		var g, w string
		if err := json.Unmarshal(got[1:], &g); err != nil || got[0] != 'x' {
			t.Fatalf("appendJSONString(%q) = %s: %v", s, got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil || g != w {
			t.Fatalf("appendJSONString(%q) = %s reads %q, json.Marshal's %q", s, got, g, w)
		}
		naive := true
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
				naive = false
			}
		}
		if plainJSON(s) != naive {
			t.Fatalf("plainJSON(%q) = %v, want %v", s, !naive, naive)
		}
	})
}
