package engine

// asciiMatcher matches strings of 1 to max ASCII characters: the first
// from one set, the others from another (what `^[first][rest]{0,max-1}$`
// matches, without the regexp engine).
type asciiMatcher struct {
	first, rest [256]bool
	max         int
}

// asciiPattern builds a matcher from two character classes written as in
// a regexp ("A-Za-z0-9_.-": ranges and single characters; a '-' is a
// range only between two characters).
func asciiPattern(first, rest string, max int) *asciiMatcher {
	m := &asciiMatcher{max: max}
	fill := func(set *[256]bool, class string) {
		for i := 0; i < len(class); i++ {
			if i+2 < len(class) && class[i+1] == '-' {
				for c := class[i]; c <= class[i+2]; c++ {
					set[c] = true
				}
				i += 2
				continue
			}
			set[class[i]] = true
		}
	}
	fill(&m.first, first)
	fill(&m.rest, rest)
	return m
}

// MatchString reports whether s matches.
func (m *asciiMatcher) MatchString(s string) bool {
	if len(s) == 0 || len(s) > m.max || !m.first[s[0]] {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !m.rest[s[i]] {
			return false
		}
	}
	return true
}
