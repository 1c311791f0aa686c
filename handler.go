package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"go.opentelemetry.io/otel/trace"
)

// Handler runs one attempt of a task. Return nil on success, an error to
// retry (Permanent(err) to dead-letter at once), or RetryAfter(d) to run
// again later without counting a failure. The context ends on the task's
// timeout, deadline, cancellation, lost lease or shutdown; a handler still
// running WorkerConfig.TimeoutGrace after that is abandoned (the attempt is
// settled without it). A panic, or ending the goroutine (runtime.Goexit),
// fails the attempt like an error.
type Handler interface {
	Work(ctx context.Context, t *Task) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, t *Task) error

func (f HandlerFunc) Work(ctx context.Context, t *Task) error { return f(ctx, t) }

// Middleware wraps a handler (logging, tracing, metrics, recovery...).
type Middleware func(Handler) Handler

// Typed adapts a function taking a decoded payload. A payload that does not
// decode into T is poison: the task dead-letters with reason "poison".
func Typed[T any](fn func(ctx context.Context, t *Task, payload T) error) Handler {
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		var v T
		if err := json.Unmarshal(t.Payload, &v); err != nil {
			return engine.Poison(payloadError(t.Kind, err))
		}
		return fn(ctx, t, v)
	})
}

// payloadError says why a payload does not fit a kind's handler in the
// payload's terms (its JSON fields and types), never the handler's Go
// type names, which mean nothing to an operator reading a dead letter.
func payloadError(kind string, err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return fmt.Errorf("payload field %q is a JSON %s, but the %s handler expects %s", te.Field, te.Value, kind, jsonKind(te.Type))
	case errors.As(err, &te):
		return fmt.Errorf("payload is a JSON %s, but the %s handler expects %s", te.Value, kind, jsonKind(te.Type))
	case errors.As(err, &se):
		return fmt.Errorf("payload is not valid JSON (at byte %d)", se.Offset)
	}
	return fmt.Errorf("payload does not fit the %s handler: %s", kind, strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names the JSON a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "another JSON type"
}

// attempt is the in-process state of one running execution.
type attempt struct {
	task   *Task
	cancel context.CancelCauseFunc
	// The task's logger (log) is built from the worker's (wlog) on first
	// use: most attempts succeed without logging, and slog.With formats its
	// attributes eagerly.
	wlog    *slog.Logger
	logOnce sync.Once
	logger  *slog.Logger

	mu       sync.Mutex
	progress *Progress
	detail   string
	released bool            // given back on shutdown: its result is ignored
	output   json.RawMessage // SetResult's JSON (result.go), kept on success
	// outputErr: the last SetResult was refused; the attempt fails with it.
	outputErr error

	elog    *execLog   // the execution's log (logs.go); nil outside a Worker
	span    trace.Span // the attempt's consumer span (nil before it runs)
	started time.Time
	ctx     attemptCtx // the handler's context (Worker.execute)
	// inputErr: the payload could not be completed with its run's input
	// (stepInputs); the attempt fails with it, no handler runs.
	inputErr error
}

// attemptCtx is a context carrying its attempt under attemptKey, as
// context.WithValue would make it, but held in the attempt: one allocation
// less per attempt.
type attemptCtx struct {
	context.Context
	a *attempt
}

func (c *attemptCtx) Value(key any) any {
	if key == (attemptKey{}) {
		return c.a
	}
	return c.Context.Value(key)
}

type attemptKey struct{}

func attemptFrom(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}

// TaskFromContext returns the task a handler's context belongs to.
func TaskFromContext(ctx context.Context) (*Task, bool) {
	if a := attemptFrom(ctx); a != nil {
		return a.task, true
	}
	return nil, false
}

// ReportProgress records how far the task got. It is stored with the next
// heartbeat and at the end of the attempt, and carried across retries and
// replays. Outside a handler it goes to the sink of ContextWithProgressSink,
// if any, and otherwise does nothing.
func ReportProgress(ctx context.Context, completed, total int) {
	a := attemptFrom(ctx)
	if a == nil {
		if sink, ok := ctx.Value(progressSinkKey{}).(func(Progress)); ok {
			sink(Progress{Total: total, Completed: completed})
		}
		return
	}
	a.mu.Lock()
	a.progress = &Progress{Total: total, Completed: completed}
	a.mu.Unlock()
}

type progressSinkKey struct{}

// ContextWithProgressSink makes ReportProgress outside an in-process
// attempt hand the progress to sink (the remote worker sends it with its
// heartbeats and its report).
func ContextWithProgressSink(ctx context.Context, sink func(Progress)) context.Context {
	return context.WithValue(ctx, progressSinkKey{}, sink)
}

// RecordDetail keeps text with the execution (an output tail, a stack): it
// is stored as the execution's error_detail.
func RecordDetail(ctx context.Context, detail string) {
	a := attemptFrom(ctx)
	if a == nil {
		return
	}
	if a.elog != nil && a.elog.sink != nil {
		detail = a.elog.sink.mask.Text(detail) // like log lines (logs.go)
	}
	a.mu.Lock()
	a.detail = detail
	a.mu.Unlock()
}

// Logger returns a logger carrying the task's correlation attributes (task
// id, queue, kind, attempt, execution id, run id, plan hash); outside a
// handler it is slog.Default().
func Logger(ctx context.Context) *slog.Logger {
	if a := attemptFrom(ctx); a != nil {
		return a.log()
	}
	return slog.Default()
}

// log is the attempt's logger: the worker's with the task's attributes
// and the span's ids, teeing into the execution's log.
func (a *attempt) log() *slog.Logger {
	a.logOnce.Do(func() {
		l := engine.WithSpan(taskLogger(a.wlog, a.task), a.span) // trace_id, span_id (logtrace.go)
		a.logger = slog.New(teeHandler{Handler: l.Handler(), log: a.elog})
	})
	return a.logger
}

// workerAttempt is an in-process attempt and its execution log, allocated
// together.
type workerAttempt struct {
	attempt
	elog execLog
	q    *queueRunner
	// actx: the attempt's context (its cancel is attempt.cancel); fetch:
	// its queue's fetch context (Worker.start).
	actx, fetch context.Context
	// slot: the attempt holds one of q's slots (taken at began).
	slot  bool
	began time.Time
	// handlerCtx: the handler's context, set before working.
	handlerCtx context.Context
	// working: the handler was called (or is about to be); armed: its
	// abandonment after the grace is scheduled (Worker.abandonAfterGrace);
	// over: the attempt's end is taken, by its handler's return or by its
	// abandonment (Worker.execute), whichever comes first.
	working, armed, over atomic.Bool
}

func (a *attempt) snapshot() (*Progress, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var p *Progress
	if a.progress != nil {
		cp := *a.progress
		p = &cp
	}
	return p, a.detail
}

// Gaps returns the gaps reported with the task a handler runs: sequences of
// its ordering key that never arrived before the drain gave up, so the
// handler can backfill what it would otherwise record as missed.
func Gaps(ctx context.Context) []Gap {
	if t, ok := TaskFromContext(ctx); ok {
		return t.Gaps
	}
	return nil
}

// MaxResultBytes bounds an attempt's JSON result (SetResult, a remote
// ErrNotInHandler: SetResult was called with a context that is not a
// handler's.
var ErrNotInHandler = errors.New("backstop: SetResult: the context is not a handler's (call it with the context the handler was given)")

// SetResult records the JSON result of the attempt ctx belongs to: v is
// marshalled (a json.RawMessage is taken as is, but must be valid JSON), at
// most MaxResultBytes, holding nothing a payload may not (CheckResult). It
// is kept with the attempt's settlement when the attempt succeeds (a
// workflow step's result, which its successors receive); a later call
// replaces an earlier one. Outside a handler's context it returns
// ErrNotInHandler.
//
// A result that cannot be recorded is the handler's bug, which no retry
// fixes: SetResult returns a Permanent error naming the value's path and
// why (and wrapping ErrInvalid), and unless a later call records a result,
// the attempt fails permanently with that error even if the handler
// returns nil; it never succeeds without the result it tried to record.
func SetResult(ctx context.Context, v any) error {
	a := attemptFrom(ctx)
	if a == nil {
		return ErrNotInHandler
	}
	b, err := engine.MarshalResult(v)
	if err != nil {
		err = Permanent(err)
	}
	a.mu.Lock()
	a.output, a.outputErr = b, err
	a.mu.Unlock()
	return err
}

// resultOf is the result the handler recorded (SetResult), for the
// success settlement, or why its last SetResult was refused.
func (a *attempt) resultOf() (json.RawMessage, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.output, a.outputErr
}

// handlerSet is what Handle, HandleDefault and Use registered. It is
// copied on each registration and read without a lock by every attempt
// (handlerFor), so thousands of attempts do not queue on the worker's
// mutex for it.
type handlerSet struct {
	byKind   map[string]Handler
	fallback Handler // runs kinds without a handler of their own
	mw       []Middleware
}

// updateHandlers applies f to a copy of the handler set and publishes it.
func (w *Worker) updateHandlers(f func(*handlerSet)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	next := handlerSet{byKind: map[string]Handler{}}
	if old := w.handlers.Load(); old != nil {
		next = handlerSet{byKind: maps.Clone(old.byKind), fallback: old.fallback, mw: slices.Clone(old.mw)}
	}
	f(&next)
	w.handlers.Store(&next)
}

// handlerFor is the handler of kind (the default handler when it has none
// of its own) wrapped in the middleware, or nil.
func (w *Worker) handlerFor(kind string) Handler {
	hs := w.handlers.Load()
	if hs == nil {
		return nil
	}
	h := hs.byKind[kind]
	if h == nil {
		h = hs.fallback
	}
	if h == nil {
		return nil
	}
	for i := len(hs.mw) - 1; i >= 0; i-- {
		h = hs.mw[i](h)
	}
	return h
}
