package execworker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/backstophq/backstop"
)

// ProgressFileEnv names the file a program may append progress lines to:
// "N/M", N steps completed of M in all (0 <= N <= M, M >= 1), one a line.
// The worker reads the file while the program runs; the last whole line is
// the task's progress, reported with the attempt's next heartbeat and at
// its end (backstop.ReportProgress). A line that is not N/M is skipped and
// noted once in the execution log.
const ProgressFileEnv = "BACKSTOP_PROGRESS_FILE"

// DefaultProgressInterval is Config.ProgressInterval's default.
const DefaultProgressInterval = 250 * time.Millisecond

// maxProgressRead bounds what one look at the progress file reads: only
// the last whole line matters, so a program that writes much more than
// that between two looks loses nothing but lines that were replaced
// anyway.
const maxProgressRead = 64 << 10

// progressReader follows one attempt's progress file.
type progressReader struct {
	ctx    context.Context
	path   string
	offset int64
	part   []byte // an unfinished last line
	last   *backstop.Progress
	warned bool
}

// ParseProgress reads one progress line: "N/M" with 0 <= N <= M and
// M >= 1 (spaces around the numbers allowed).
func ParseProgress(line string) (backstop.Progress, bool) {
	s := bytes.TrimSpace([]byte(line))
	i := bytes.IndexByte(s, '/')
	if i < 0 {
		return backstop.Progress{}, false
	}
	n, err1 := strconv.Atoi(string(bytes.TrimSpace(s[:i])))
	m, err2 := strconv.Atoi(string(bytes.TrimSpace(s[i+1:])))
	if err1 != nil || err2 != nil || n < 0 || m < 1 || n > m {
		return backstop.Progress{}, false
	}
	return backstop.Progress{Completed: n, Total: m}, true
}

// poll reads what was appended since the last look and reports the last
// whole line's progress when it changed. A file that shrank (rewritten)
// is read again from its start. The final look takes an unfinished last
// line as whole.
func (p *progressReader) poll(final bool) {
	// O_NOFOLLOW and O_NONBLOCK: as for the result file.
	f, err := os.OpenFile(p.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			p.warn("cannot be read: " + err.Error())
		}
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		p.warn("is not a regular file")
		return
	}
	if st.Size() < p.offset {
		p.offset, p.part = 0, nil
	}
	skipped := false
	if st.Size()-p.offset > maxProgressRead {
		// Skip to the tail: the lines before it are stale, and so is the
		// piece of one the tail starts with.
		p.offset, p.part, skipped = st.Size()-maxProgressRead, nil, true
	}
	b, err := io.ReadAll(io.NewSectionReader(f, p.offset, maxProgressRead))
	if err != nil {
		p.warn("cannot be read: " + err.Error())
		return
	}
	p.offset += int64(len(b))
	if skipped {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.part = []byte("x") // still inside the skipped line
			return
		}
		b = b[i+1:]
	}
	b = append(p.part, b...)
	if final && len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		p.part = clipPart(b)
		return
	}
	p.part = clipPart(b[end+1:])
	var latest *backstop.Progress
	for line := range bytes.SplitSeq(b[:end], []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		pr, ok := ParseProgress(string(line))
		if !ok {
			p.warn("line " + strconv.Quote(truncate(string(line), 64)) + " is not N/M (completed of total steps)")
			continue
		}
		latest = &pr
	}
	if latest != nil && (p.last == nil || *p.last != *latest) {
		p.last = latest
		backstop.ReportProgress(p.ctx, latest.Completed, latest.Total)
	}
}

// clipPart keeps an unfinished line, unless it is already too long to be
// a progress line: it then becomes "x", so that the line it ends is
// noted as not N/M rather than read from its tail.
func clipPart(b []byte) []byte {
	if len(b) > 64 {
		return []byte("x") // not N/M whatever follows
	}
	return append([]byte(nil), b...)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (p *progressReader) warn(what string) {
	if p.warned {
		return
	}
	p.warned = true
	backstop.WriteLog(p.ctx, backstop.LogStreamOutput, "backstop: "+ProgressFileEnv+" "+what+"; ignored")
}

// follow polls the file every interval until stop is closed, then once
// more (the program's last line counts).
func (p *progressReader) follow(interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			p.poll(true)
			return
		case <-t.C:
			p.poll(false)
		}
	}
}
