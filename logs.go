package backstop

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/redact"
	"github.com/backstophq/backstop/store"
)

// Execution logs: what a handler logs during one attempt (its Logger, and
// WriteLog for a program's output) is kept with that execution, bounded to
// MaxLogLines lines and MaxLogBytes bytes, then one truncation marker. The
// in-process worker buffers the lines and writes them in batches, off the
// settle path; remote workers send theirs with POST /v1/tasks/{id}/logs
// (internal/remote: AppendLogs).

// Bounds of one execution's log.
const (
	MaxLogLines = engine.MaxLogLines
	MaxLogBytes = engine.MaxLogBytes
)

// Log streams.
const (
	LogStreamLog       = engine.LogStreamLog
	LogStreamOutput    = engine.LogStreamOutput
	LogStreamStdout    = engine.LogStreamStdout
	LogStreamStderr    = engine.LogStreamStderr
	LogStreamTruncated = engine.LogStreamTruncated
)

// LogLine is one line of an execution's log.
type LogLine = store.LogLine

// execLog is one in-process attempt's log.
type execLog struct {
	mu    sync.Mutex
	bound engine.LogBound
	task  *Task
	sink  *logFlusher
	now   func() time.Time
}

func (l *execLog) write(stream, line string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	kept := l.bound.Take([]LogLine{{TaskID: l.task.ID, ExecutionID: l.task.ExecutionID, At: l.now(), Stream: stream, Line: line}}, l.now())
	l.mu.Unlock()
	l.sink.add(kept)
}

type logSinkKey struct{}

// ContextWithLogSink makes WriteLog and Logger outside an in-process
// attempt hand their lines to sink (the remote worker sends them to the
// server).
func ContextWithLogSink(ctx context.Context, sink func(stream, line string)) context.Context {
	return context.WithValue(ctx, logSinkKey{}, sink)
}

// WriteLog appends a line to the running attempt's execution log (see
// Logger for structured records). Outside a handler it does nothing.
func WriteLog(ctx context.Context, stream, line string) {
	if a := attemptFrom(ctx); a != nil {
		a.elog.write(stream, line)
		return
	}
	if sink, ok := ctx.Value(logSinkKey{}).(func(stream, line string)); ok {
		sink(stream, line)
	}
}

// teeHandler passes records on and writes each as a text line into the
// execution's log.
type teeHandler struct {
	slog.Handler
	log    *execLog
	prefix string // the WithAttrs/WithGroup attributes added by the handler, as text
}

func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte(' ')
	b.WriteString(r.Message)
	b.WriteString(h.prefix)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.log.write(LogStreamLog, b.String())
	if h.Handler.Enabled(ctx, r.Level) {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

// Enabled: every level from Info reaches the execution log, whatever the
// process logger keeps.
func (h teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.Handler.Enabled(ctx, l)
}

func (h teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	p := h.prefix
	for _, a := range as {
		p += fmt.Sprintf(" %s=%v", a.Key, a.Value)
	}
	return teeHandler{Handler: h.Handler.WithAttrs(as), log: h.log, prefix: p}
}

func (h teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{Handler: h.Handler.WithGroup(name), log: h.log, prefix: h.prefix}
}

// logFlusher batches lines of all attempts and writes them every
// logFlushEvery or logFlushLines lines.
type logFlusher struct {
	st   store.Store
	log  *slog.Logger
	mask *redact.Masker // lines are masked before they are stored

	mu      sync.Mutex
	pending []LogLine
	kick    chan struct{}
	done    chan struct{}
	stop    chan struct{}
}

const (
	logFlushEvery = 200 * time.Millisecond
	logFlushLines = 500
	// logPendingMax bounds what waits in memory when the store is slow;
	// beyond it lines are dropped (and counted in a warning).
	logPendingMax = 50000
)

func newLogFlusher(st store.Store, log *slog.Logger, mask *redact.Masker) *logFlusher {
	f := &logFlusher{st: st, log: log, mask: mask, kick: make(chan struct{}, 1), done: make(chan struct{}), stop: make(chan struct{})}
	go f.loop()
	return f
}

func (f *logFlusher) add(lines []LogLine) {
	if len(lines) == 0 {
		return
	}
	f.mu.Lock()
	if len(f.pending) >= logPendingMax {
		f.mu.Unlock()
		f.log.Warn("execution log lines dropped: the store is not keeping up", "lines", len(lines))
		return
	}
	f.pending = append(f.pending, lines...)
	n := len(f.pending)
	f.mu.Unlock()
	if n >= logFlushLines {
		signal(f.kick)
	}
}

func (f *logFlusher) loop() {
	defer close(f.done)
	t := time.NewTicker(logFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-f.kick:
		case <-f.stop:
			f.flush()
			return
		}
		f.flush()
	}
}

func (f *logFlusher) flush() {
	f.mu.Lock()
	batch := f.pending
	f.pending = nil
	f.mu.Unlock()
	for i := range batch { // off the handler's path (redaction.go)
		batch[i].Line = f.mask.Line(batch[i].Line)
	}
	for len(batch) > 0 {
		n := min(len(batch), 1000)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := f.st.AppendLogs(ctx, batch[:n])
		cancel()
		if err != nil {
			f.log.Warn("writing execution logs failed; lines dropped", "error", err, "lines", n)
		}
		batch = batch[n:]
	}
}

// close writes what is pending and stops.
func (f *logFlusher) close() {
	close(f.stop)
	<-f.done
}

// ReadLogs returns lines of a task's execution with seq > after, at most
// limit (1-10000).
func (c *Client) ReadLogs(ctx context.Context, taskID, executionID string, after, limit int) ([]LogLine, error) {
	if limit < 1 || limit > 10000 {
		return nil, invalid("limit", "must be between 1 and 10000")
	}
	if after < 0 {
		return nil, invalid("after", "must not be negative")
	}
	if _, err := c.Get(ctx, taskID); err != nil {
		return nil, err
	}
	return c.store.ReadLogs(ctx, taskID, executionID, after, limit)
}

// A task replayed again and again collects executions without end; the
// operator's views read them a window at a time, newest last as Get lists
// them.

// Bounds of an executions window.
const (
	DefaultExecutionsLimit = 100
	MaxExecutionsLimit     = 1000
)

// ExecutionWindow selects the executions GetWindow returns: the newest
// Limit (default DefaultExecutionsLimit, at most MaxExecutionsLimit) of
// those older than the execution Before ("": from the newest), oldest
// first.
type ExecutionWindow struct {
	Limit  int
	Before string // an ExecutionsPage.Next
}

// ExecutionsPage is what a window left out: Total executions in all, and
// Next, the cursor of the older ones ("" when none are left).
type ExecutionsPage struct {
	Total int
	Next  string
}

// GetWindow returns a task with one window of its executions.
func (c *Client) GetWindow(ctx context.Context, id string, w ExecutionWindow) (*Task, ExecutionsPage, error) {
	if w.Limit < 0 || w.Limit > MaxExecutionsLimit {
		return nil, ExecutionsPage{}, invalid("executions_limit", "must be between 1 and %d", MaxExecutionsLimit)
	}
	limit := w.Limit
	if limit == 0 {
		limit = DefaultExecutionsLimit
	}
	t, err := c.Get(ctx, id)
	if err != nil {
		return nil, ExecutionsPage{}, err
	}
	all := t.Executions
	end := len(all)
	if w.Before != "" {
		end = slices.IndexFunc(all, func(e Execution) bool { return e.ExecutionID == w.Before })
		if end < 0 {
			return nil, ExecutionsPage{}, invalid("executions_before", "%q is not an execution of task %s", w.Before, t.ID)
		}
	}
	start := max(0, end-limit)
	t.Executions = all[start:end:end]
	page := ExecutionsPage{Total: len(all)}
	if start > 0 {
		page.Next = all[start].ExecutionID
	}
	return t, page, nil
}
