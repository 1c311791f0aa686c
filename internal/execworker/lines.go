package execworker

import (
	"bytes"
	"context"

	"github.com/backstophq/backstop"
)

// lineLog writes one of a program's streams (stdout or stderr), line by
// line, into the attempt's execution log under that stream's name
// (backstop.WriteLog: the in-process attempt, or the remote worker's
// sink). The execution's bound applies there.
type lineLog struct {
	ctx    context.Context
	stream string
	part   []byte
}

// maxPartial flushes a line that never ends.
const maxPartial = 8 << 10

func (l *lineLog) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.part = append(l.part, p...)
			if len(l.part) >= maxPartial {
				l.emit()
			}
			break
		}
		l.part = append(l.part, p[:i]...)
		l.emit()
		p = p[i+1:]
	}
	return n, nil
}

func (l *lineLog) emit() {
	backstop.WriteLog(l.ctx, l.stream, string(l.part))
	l.part = l.part[:0]
}

// close emits a last line without a newline.
func (l *lineLog) close() {
	if len(l.part) > 0 {
		l.emit()
	}
}
