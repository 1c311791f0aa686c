package engine

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop/store"
)

// LogLine is one line of an execution's log.
type LogLine = store.LogLine

// Bounds of one execution's log.
const (
	MaxLogLines = 1000
	MaxLogBytes = 256 << 10
	// maxLogLine cuts a single line.
	maxLogLine = 8 << 10
)

// Log streams.
const (
	LogStreamLog       = "log"       // the handler's logger
	LogStreamOutput    = "output"    // a program's output, its streams not told apart
	LogStreamStdout    = "stdout"    // a program's standard output (backstop work)
	LogStreamStderr    = "stderr"    // a program's standard error (backstop work)
	LogStreamTruncated = "truncated" // the marker after the bound
)

// LogBound numbers lines and applies the bounds for one execution.
type LogBound struct {
	lines, bytes, seq int
	truncated         bool
}

// Take returns the lines to keep from in (numbered), with the marker when
// the bound is reached.
func (b *LogBound) Take(in []LogLine, now time.Time) []LogLine {
	var out []LogLine
	for _, l := range in {
		if b.truncated {
			break
		}
		l.Line = cutLine(l.Line)
		if b.lines >= MaxLogLines || b.bytes+len(l.Line) > MaxLogBytes {
			b.truncated = true
			b.seq++
			out = append(out, LogLine{TaskID: l.TaskID, ExecutionID: l.ExecutionID, Seq: b.seq, At: now, Stream: LogStreamTruncated,
				Line: fmt.Sprintf("…log truncated: an execution keeps at most %d lines or %d KiB…", MaxLogLines, MaxLogBytes>>10)})
			break
		}
		b.lines++
		b.bytes += len(l.Line)
		b.seq++
		l.Seq = b.seq
		out = append(out, l)
	}
	return out
}

func cutLine(s string) string {
	s = strings.TrimRight(s, "\r\n")
	if len(s) > maxLogLine {
		s = s[:maxLogLine]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// BoundAfter is the bound of an execution whose log already holds u.
func BoundAfter(u store.LogUsage) LogBound {
	b := LogBound{lines: u.Lines, bytes: u.Bytes, seq: u.LastSeq, truncated: u.Lines > MaxLogLines || u.Bytes > MaxLogBytes}
	if u.LastSeq > u.Lines { // a marker is there
		b.truncated = true
	}
	return b
}

// Truncated says whether the bound was reached (the marker is written).
func (b *LogBound) Truncated() bool { return b.truncated }
