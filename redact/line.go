package redact

import (
	"encoding/json"
	"strings"
)

// MaskText is what a matched value in a text line becomes.
const MaskText = "[REDACTED]"

// Line masks a log line (docs/redaction.md, "Execution logs"):
//
//   - A line that is, from its first '{' on, one JSON value (a JSON log
//     record, possibly after a text prefix) is masked as JSON (see JSON),
//     then the text inside its strings as below.
//   - Otherwise every `key=value`, `key: value`, `"key": "value"` whose key
//     matches the list has its value replaced by [REDACTED]: a quoted value
//     up to its closing quote, a bracketed one ({…} or […]) up to the
//     matching bracket, after `key:` (a header, "Authorization: Basic x")
//     the rest of the line up to the next ',', ';' or a quote, after `key=` up
//     to the next space, '&', ',', ';', '"', '}' or ']'.
//   - A word "Bearer" (any case) hides the token after it.
//
// A line with no possible match comes back unchanged. Masking errs on the
// side of hiding: a matched key's value may take more of the line than the
// secret.
func (m *Masker) Line(s string) string {
	if m == nil || len(m.keys) == 0 || s == "" || !m.mayMatch([]byte(s)) {
		return s
	}
	if i := strings.IndexByte(s, '{'); i >= 0 && json.Valid([]byte(s[i:])) {
		// Keys first, then text inside string values ("msg":"... password=x").
		out := m.text(string(m.JSON(json.RawMessage(s[i:]))))
		if !json.Valid([]byte(out)) {
			out = Mask // the text pass cut across the JSON: hide the record
		}
		return s[:i] + out
	}
	return m.text(s)
}

// Text masks every line of a multi-line text (an output tail) by Line.
func (m *Masker) Text(s string) string {
	if m == nil || len(m.keys) == 0 || s == "" || !m.mayMatch([]byte(s)) {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = m.Line(l)
	}
	return strings.Join(lines, "\n")
}

func isKeyByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// text is the key=value scanner of Line.
func (m *Masker) text(s string) string {
	var b strings.Builder
	done := 0 // s[:done] is written to b
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' && i >= 6 && strings.EqualFold(s[i-6:i], "bearer") && (i == 6 || !isKeyByte(s[i-7])) {
			// "Bearer <token>": hide the token.
			j := i
			for j < len(s) && s[j] == ' ' {
				j++
			}
			end := j
			for end < len(s) && s[end] != ' ' && s[end] != '"' && s[end] != ',' && s[end] != ';' {
				end++
			}
			if end > j && s[j:end] != MaskText {
				b.WriteString(s[done:j])
				b.WriteString(MaskText)
				done, i = end, end-1
			}
			continue
		}
		if c != '=' && c != ':' {
			continue
		}
		key, quoted := keyBefore(s, i)
		if key == "" || !m.Matches(key) {
			continue
		}
		j := i + 1
		for j < len(s) && s[j] == ' ' {
			j++
		}
		if j >= len(s) {
			continue
		}
		start, end := j, j
		switch s[j] {
		case '"', '\'':
			start = j + 1
			end = closingQuote(s, j)
		case '{', '[':
			end = closingBracket(s, j)
		default:
			stop := " &,;\"\\}]"
			if c == ':' && !quoted {
				stop = ",;\"\\'"
			}
			for end < len(s) && !strings.ContainsRune(stop, rune(s[end])) {
				end++
			}
			for end > start && s[end-1] == ' ' {
				end--
			}
		}
		if end <= start || s[start:end] == MaskText {
			continue
		}
		b.WriteString(s[done:start])
		b.WriteString(MaskText)
		done, i = end, end-1
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// keyBefore is the key ending just before the separator at i: a quoted key
// ("password":) or a run of key characters; quoted says which.
func keyBefore(s string, i int) (string, bool) {
	k := i
	for k > 0 && s[k-1] == ' ' && s[i] == ':' {
		k--
	}
	if k > 0 && s[k-1] == '"' {
		open := strings.LastIndexByte(s[:k-1], '"')
		if open < 0 {
			return "", false
		}
		return s[open+1 : k-1], true
	}
	j := k
	for j > 0 && isKeyByte(s[j-1]) {
		j--
	}
	return s[j:k], false
}

// closingQuote is the index of the quote closing the one at j (a
// backslash escapes), or len(s).
func closingQuote(s string, j int) int {
	q := s[j]
	for k := j + 1; k < len(s); k++ {
		switch s[k] {
		case '\\':
			k++
		case q:
			return k
		}
	}
	return len(s)
}

// closingBracket is the index just after the bracket matching the one at
// j (strings skipped), or len(s).
func closingBracket(s string, j int) int {
	depth := 0
	for k := j; k < len(s); k++ {
		switch s[k] {
		case '"':
			k = closingQuote(s, k)
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return k + 1
			}
		}
	}
	return len(s)
}
