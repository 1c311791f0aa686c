package store

import (
	"strings"
	"unicode/utf8"
)

// CleanText makes s storable and servable on every driver: invalid UTF-8
// and NUL bytes become U+FFFD. Postgres text and jsonb refuse both, and JSON
// must be UTF-8; it is for text the engine records as a result (an error
// message), which must never be lost for the bytes it holds. Input is
// refused instead (the library's validation).
func CleanText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// CleanSettlements returns settlements with CleanText applied to their
// error texts: the same slice when nothing needed it (the usual case), else
// a copy, so the caller's slice is never changed.
func CleanSettlements(ss []Settlement) []Settlement {
	out := ss
	for i := range ss {
		e, d := CleanText(ss[i].Error), CleanText(ss[i].ErrorDetail)
		if e == ss[i].Error && d == ss[i].ErrorDetail {
			continue
		}
		if &out[0] == &ss[0] {
			out = append([]Settlement(nil), ss...)
		}
		out[i].Error, out[i].ErrorDetail = e, d
	}
	return out
}
