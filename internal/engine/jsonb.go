package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// What PostgreSQL's jsonb (and its json operators, which a where condition
// evaluated in SQL uses) cannot hold, though it is valid JSON: a \u0000
// escape, a UTF-16 surrogate escape that is not half of a pair, and a
// number outside the numeric type: a magnitude of 1e131072 or more (a
// decimal weight of 131072 digits), more than 16383 digits after the
// decimal point once the exponent is applied, or an exponent of
// ±1073741823 or more. Such a document stored in a json column breaks every
// SQL condition that reads it, so it is refused on every store alike. So is
// nesting deeper than SQLite's JSON functions read (1000 arrays and objects
// one inside another), which breaks them the same way on SQLite.
const (
	jsonMaxDepth     = 1000        // SQLite's JSON_MAX_DEPTH
	jsonbMaxWeight   = 131072      // the leading digit's decimal exponent must be below this
	jsonbMaxScale    = 16383       // digits after the decimal point
	jsonbMaxExponent = 1<<31/2 - 1 // INT_MAX/2: an exponent this large or larger is refused outright
	jsonbLimitsText  = "a magnitude below 1e131072 and at most 16383 digits after the decimal point"
	jsonbNotHeld     = "PostgreSQL's jsonb cannot hold it"
	jsonbMaxLiteral  = 40 // a number quoted in an error is cut to this many bytes
	jsonbPathKept    = 80 // a path in an error keeps this many bytes at each end
	jsonbIdentFirst  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
	jsonbIdentOthers = jsonbIdentFirst + "0123456789"
)

// JSONBProblem is why the valid JSON document b cannot be held by jsonb
// (or is nested deeper than SQLite's JSON functions read), naming the
// value's path under root in the where syntax
// (payload.items[2].amount, payload["a-b"]); "" when it can. b must be
// valid JSON (json.Valid, which also bounds its nesting to 10000).
func JSONBProblem(root string, b []byte) string {
	// The first pass keeps no path (nothing to allocate on the common
	// path); a document with a problem is scanned again, keeping it.
	s := jsonbScan{b: b}
	if s.value(); s.problem == "" {
		return ""
	}
	s = jsonbScan{b: b, root: root, track: true}
	s.value()
	return s.problem
}

type jsonbSeg struct {
	key []byte // the key's JSON string, quotes included; nil for an index
	idx int
}

type jsonbScan struct {
	b       []byte
	i       int
	depth   int  // arrays and objects open around s.i
	track   bool // keep path, and say where in problem
	root    string
	path    []jsonbSeg
	problem string
}

func (s *jsonbScan) ws() {
	b, i := s.b, s.i
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	s.i = i
}

// value scans one value at s.i; it stops at the first problem.
func (s *jsonbScan) value() {
	s.ws()
	switch c := s.b[s.i]; c {
	case '{', '[':
		if s.depth++; s.depth > jsonMaxDepth {
			s.fail("the value at", fmt.Sprintf("is nested more than %d arrays and objects deep (SQLite's JSON functions read no deeper)", jsonMaxDepth))
			return
		}
		if c == '{' {
			s.object()
		} else {
			s.array()
		}
		s.depth--
	case '"':
		if why := s.str(); why != "" {
			s.fail("the string at", why)
		}
	case 't', 'n':
		s.i += 4
	case 'f':
		s.i += 5
	default:
		s.number()
	}
}

func (s *jsonbScan) object() {
	s.i++ // '{'
	s.ws()
	if s.b[s.i] == '}' {
		s.i++
		return
	}
	for {
		s.ws()
		start := s.i
		if why := s.str(); why != "" {
			s.fail("a key in", why)
			return
		}
		if s.track {
			s.path = append(s.path, jsonbSeg{key: s.b[start:s.i]})
		}
		s.ws()
		s.i++ // ':'
		if s.value(); s.problem != "" {
			return
		}
		if s.track {
			s.path = s.path[:len(s.path)-1]
		}
		s.ws()
		s.i++ // ',' or '}'
		if s.b[s.i-1] == '}' {
			return
		}
	}
}

func (s *jsonbScan) array() {
	s.i++ // '['
	s.ws()
	if s.b[s.i] == ']' {
		s.i++
		return
	}
	for n := 0; ; n++ {
		if s.track {
			s.path = append(s.path, jsonbSeg{idx: n})
		}
		if s.value(); s.problem != "" {
			return
		}
		if s.track {
			s.path = s.path[:len(s.path)-1]
		}
		s.ws()
		s.i++ // ',' or ']'
		if s.b[s.i-1] == ']' {
			return
		}
	}
}

// str scans the string at s.i and says what in it jsonb cannot hold.
func (s *jsonbScan) str() string {
	s.i++ // '"'
	for {
		// Most bytes are plain: skip them with locals, not through s.
		b, i := s.b, s.i
		for i < len(b) && b[i] != '"' && b[i] != '\\' {
			i++
		}
		s.i = i
		switch s.b[s.i] {
		case '"':
			s.i++
			return ""
		case '\\':
			if s.b[s.i+1] != 'u' {
				s.i += 2
				continue
			}
			u := hex4(s.b[s.i+2 : s.i+6])
			s.i += 6
			switch {
			case u == 0:
				return `holds \u0000, the NUL character, and ` + jsonbNotHeld
			case u >= 0xD800 && u <= 0xDBFF:
				if s.i+6 <= len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					if lo := hex4(s.b[s.i+2 : s.i+6]); lo >= 0xDC00 && lo <= 0xDFFF {
						s.i += 6
						continue
					}
				}
				return fmt.Sprintf(`holds \u%04x, a UTF-16 high surrogate not followed by a low one (not a character; `+jsonbNotHeld+`)`, u)
			case u >= 0xDC00 && u <= 0xDFFF:
				return fmt.Sprintf(`holds \u%04x, a UTF-16 low surrogate without a high one before it (not a character; `+jsonbNotHeld+`)`, u)
			}
		}
	}
}

func hex4(h []byte) int {
	n := 0
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		n = n<<4 | int(c)
	}
	return n
}

// number scans the number at s.i and checks it against PostgreSQL's
// numeric, as its input function does: the exponent first, then the
// digits after the point (their count less the exponent), then the
// leading non-zero digit's place.
func (s *jsonbScan) number() {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	intStart := s.i
	s.digits()
	intDigits := s.b[intStart:s.i]
	var frac []byte
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		fs := s.i
		s.digits()
		frac = s.b[fs:s.i]
	}
	var exp int64
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		neg := s.b[s.i] == '-'
		if s.b[s.i] == '-' || s.b[s.i] == '+' {
			s.i++
		}
		for s.i < len(s.b) && s.b[s.i] == '0' {
			s.i++
		}
		es := s.i
		s.digits()
		if s.i-es > 10 { // above INT_MAX/2, whose 10 digits fit an int64
			s.failNumber(start)
			return
		}
		for _, c := range s.b[es:s.i] {
			exp = exp*10 + int64(c-'0')
		}
		if neg {
			exp = -exp
		}
		if exp >= jsonbMaxExponent || exp <= -jsonbMaxExponent {
			s.failNumber(start)
			return
		}
	}
	if int64(len(frac))-exp > jsonbMaxScale {
		s.failNumber(start)
		return
	}
	// The leading non-zero digit's decimal exponent. A value whose digits
	// are all zero is zero, whatever its exponent. Too small a magnitude
	// cannot happen: the scale bound above keeps every digit within
	// 16383 places after the point.
	weight, found := int64(0), false
	for k, c := range intDigits {
		if c != '0' {
			weight, found = int64(len(intDigits)-1-k)+exp, true
			break
		}
	}
	if !found {
		for k, c := range frac {
			if c != '0' {
				weight, found = int64(-(k+1))+exp, true
				break
			}
		}
	}
	if found && weight >= jsonbMaxWeight {
		s.failNumber(start)
	}
}

func (s *jsonbScan) digits() {
	b, i := s.b, s.i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	s.i = i
}

func (s *jsonbScan) failNumber(start int) {
	if !s.track {
		s.problem = "number"
		return
	}
	end := start
	for end < len(s.b) && strings.IndexByte("+-.0123456789eE", s.b[end]) >= 0 {
		end++
	}
	lit := string(s.b[start:end])
	if len(lit) > jsonbMaxLiteral {
		lit = lit[:jsonbMaxLiteral/2] + "…" + lit[len(lit)-jsonbMaxLiteral/2:] + fmt.Sprintf(" (%d characters)", len(lit))
	}
	s.problem = fmt.Sprintf("the number at %s, %s, is outside what PostgreSQL's jsonb can hold (%s)", s.pathString(), lit, jsonbLimitsText)
}

func (s *jsonbScan) fail(what, why string) {
	if !s.track {
		s.problem = why
		return
	}
	s.problem = what + " " + s.pathString() + " " + why
}

// pathString is the path of the value being scanned, in the where syntax,
// its middle cut out when it is long (a deeply nested value).
func (s *jsonbScan) pathString() string {
	p := s.fullPath()
	if len(p) <= 2*jsonbPathKept {
		return p
	}
	head, tail := jsonbPathKept, len(p)-jsonbPathKept
	for head > 0 && !utf8.RuneStart(p[head]) {
		head--
	}
	for tail < len(p) && !utf8.RuneStart(p[tail]) {
		tail++
	}
	return p[:head] + "…" + p[tail:]
}

func (s *jsonbScan) fullPath() string {
	var b strings.Builder
	b.WriteString(s.root)
	for _, seg := range s.path {
		if seg.key == nil {
			fmt.Fprintf(&b, "[%d]", seg.idx)
			continue
		}
		var k string
		if json.Unmarshal(seg.key, &k) != nil {
			k = string(seg.key)
		}
		if k != "" && strings.IndexByte(jsonbIdentFirst, k[0]) >= 0 && strings.Trim(k, jsonbIdentOthers) == "" {
			b.WriteString(".")
			b.WriteString(k)
		} else {
			b.WriteString("[" + strconv.Quote(k) + "]")
		}
	}
	return b.String()
}
