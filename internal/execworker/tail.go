package execworker

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// tail keeps the last limit bytes written to it, and how many came before.
type tail struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	total int64
}

func newTail(limit int) *tail { return &tail{limit: limit} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	// Compact only once the buffer doubles, so writes stay amortised O(1).
	if len(t.buf) > 2*t.limit {
		n := copy(t.buf, t.buf[len(t.buf)-t.limit:])
		t.buf = t.buf[:n]
	}
	return len(p), nil
}

// String is the kept output as valid UTF-8 without NUL bytes (stores keep it
// as text), preceded by a marker when earlier output was dropped.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > t.limit {
		b = b[len(b)-t.limit:]
	}
	omitted := t.total - int64(len(b))
	if omitted > 0 {
		// Do not start in the middle of a character.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
			omitted++
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if omitted > 0 {
		s = fmt.Sprintf("…truncated (%d earlier bytes omitted)…\n", omitted) + s
	}
	return s
}

// joinTails is the end of a program's output read from several streams
// (stdout, then stderr: its error last, where a reader looks), within
// limit bytes, the marker counting every stream's omitted bytes.
func joinTails(limit int, ts ...*tail) string {
	j := newTail(limit)
	var total int64
	for _, t := range ts {
		t.mu.Lock()
		b := t.buf
		if len(b) > t.limit {
			b = b[len(b)-t.limit:]
		}
		_, _ = j.Write(b)
		total += t.total
		t.mu.Unlock()
	}
	j.total = total
	return j.String()
}
