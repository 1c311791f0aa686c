package engine

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Telemetry of remote attempts (docs/observability.md). The fast completion
// path (Complete, CompleteMany) does not read the task, so the process that
// hands out a claim remembers, per execution, what its telemetry needs:
// the task's queue, kind, attempt, attributes, the attempt's start, and the
// attempt's consumer span `process <queue>` (started at the claim with the
// attempt's start time, ended when the attempt is settled). The claim
// answer carries the span's W3C traceparent so the worker's own spans are
// its children.
//
// Counting does not depend on this memory: a settlement of a lease this
// process did not hand out (another `serve` process, or one before a
// restart) reads the task and its execution after it applied. Only the span
// is lost then; the entry the other process keeps is ended by its sweep
// with the outcome the store recorded.

// remoteAttemptsMax bounds the remembered attempts; beyond it claims are
// not remembered (their settlements are counted by the read above and have
// no span).
const remoteAttemptsMax = 50000

// remoteSweepEvery and remoteSweepGrace: how often, and how long after its
// lease ran out, an attempt nobody settled here is dropped.
const (
	remoteSweepEvery = 30 * time.Second
	remoteSweepGrace = time.Minute
	remoteSweepMax   = 100 // entries ended per sweep (each reads the store)
)

type remoteAttempt struct {
	task  *Task // a slim copy: no payload
	span  trace.Span
	until time.Time // lease expiry as this process last set it
}

type remoteAttempts struct {
	mu        sync.Mutex
	m         map[string]*remoteAttempt // by execution id
	lastSweep time.Time
}

// add remembers claimed tasks and starts their spans.
func (e *Engine) RememberClaims(ctx context.Context, ts []*Task, lease time.Duration) {
	if len(ts) == 0 {
		return
	}
	now := e.Now()
	r := &e.remoteAttempts
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*remoteAttempt{}
	}
	for _, t := range ts {
		if len(r.m) >= remoteAttemptsMax {
			e.Telemetry.Started(ctx, t, nil)
			continue
		}
		slim := &Task{ID: t.ID, Queue: t.Queue, Kind: t.Kind, Attempt: t.Attempt, ExecutionID: t.ExecutionID,
			Attributes: t.Attributes, AttemptedAt: t.AttemptedAt, TraceParent: t.TraceParent, MaxAttempts: t.MaxAttempts}
		ra := &remoteAttempt{task: slim, until: now.Add(lease)}
		_, ra.span = e.Telemetry.StartProcess(ctx, slim, trace.WithTimestamp(attemptStart(t, now)))
		e.Telemetry.Started(ctx, t, ra.span)
		r.m[t.ExecutionID] = ra
	}
}

// take forgets one remembered attempt and returns it (nil: not known here).
func (r *remoteAttempts) take(token string) *remoteAttempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	ra := r.m[token]
	if ra != nil {
		delete(r.m, token)
	}
	return ra
}

// extend records a heartbeat's new lease expiry.
func (r *remoteAttempts) extend(token string, until time.Time) {
	r.mu.Lock()
	if ra := r.m[token]; ra != nil {
		ra.until = until
	}
	r.mu.Unlock()
}

// RemoteTraceParent is the W3C traceparent of the consumer span of the
// remote attempt executionID names ("": none recorded here).
func (e *Engine) RemoteTraceParent(executionID string) string {
	r := &e.remoteAttempts
	r.mu.Lock()
	ra := r.m[executionID]
	r.mu.Unlock()
	if ra == nil || ra.span == nil || !ra.span.SpanContext().IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	e.Telemetry.prop.Inject(trace.ContextWithSpanContext(context.Background(), ra.span.SpanContext()), carrier)
	return carrier["traceparent"]
}

// RemoteSettled records a remote attempt whose settlement applied: its
// count, duration, retry or dead letter, and the end of its span; t is the
// task when the caller read it (Fail), else nil. It answers the span's
// context and the task as far as it was read (nil: not read), for the
// caller's logs.
func (e *Engine) RemoteSettled(ctx context.Context, t *Task, s *store.Settlement) (trace.SpanContext, *Task) {
	ra := e.remoteAttempts.take(s.ExecutionID)
	var span trace.Span
	start := time.Time{}
	if ra != nil {
		span = ra.span
		if t == nil {
			t = ra.task
		}
	}
	if t != nil {
		start = attemptStart(t, time.Time{})
	}
	if t == nil || start.IsZero() {
		// Claimed through another process: read what counting needs.
		lt, ls := e.loadAttempt(ctx, s.TaskID, s.ExecutionID)
		if t == nil {
			t = lt
		}
		start = ls
	}
	if start.IsZero() {
		start = s.FinishedAt
	}
	var sc trace.SpanContext
	if span != nil {
		sc = span.SpanContext()
	}
	if s.Outcome == bt.OutcomeReleased { // not an attempt that counts (as in-process)
		if t != nil {
			e.Telemetry.settledEvent(span, t, start, s)
		}
		e.Telemetry.Released(span)
		return sc, t
	}
	if t == nil {
		e.cfg.Logger.Warn("remote attempt settled but its task could not be read: not counted", "task_id", s.TaskID)
		if span != nil {
			span.End()
		}
		return sc, t
	}
	e.Telemetry.Settled(span, t, start, s)
	return sc, t
}

// loadAttempt reads a task and the start of its execution id (the fallback
// of remoteSettled). Errors leave the zero values.
func (e *Engine) loadAttempt(ctx context.Context, taskID, executionID string) (*Task, time.Time) {
	ctx = context.WithoutCancel(ctx)
	t, err := e.store.Get(ctx, taskID)
	if err != nil {
		return nil, time.Time{}
	}
	exs, err := e.store.Executions(ctx, taskID)
	if err == nil {
		for i := len(exs) - 1; i >= 0; i-- {
			if exs[i].ExecutionID == executionID {
				return t, exs[i].StartedAt
			}
		}
	}
	return t, time.Time{}
}

// SweepRemote ends the spans of remembered attempts whose lease ran out
// more than remoteSweepGrace ago without a settlement here (another
// process settled them, most often its maintenance as lease_expired), with
// the outcome the store recorded. It counts nothing: whoever settled them
// did. At most one sweep per remoteSweepEvery.
func (e *Engine) SweepRemote(ctx context.Context) {
	now := e.Now()
	r := &e.remoteAttempts
	r.mu.Lock()
	if now.Sub(r.lastSweep) < remoteSweepEvery {
		r.mu.Unlock()
		return
	}
	r.lastSweep = now
	var old []*remoteAttempt
	for tok, ra := range r.m {
		if len(old) >= remoteSweepMax {
			break
		}
		if now.Sub(ra.until) > remoteSweepGrace {
			old = append(old, ra)
			delete(r.m, tok)
		}
	}
	r.mu.Unlock()
	for _, ra := range old {
		if ra.span == nil {
			continue
		}
		var ex *bt.Execution
		if exs, err := e.store.Executions(ctx, ra.task.ID); err == nil {
			for i := range exs {
				if exs[i].ExecutionID == ra.task.ExecutionID {
					ex = &exs[i]
				}
			}
		}
		e.Telemetry.endElsewhere(ra.span, ex)
	}
}

// ExtendRemote records a remote attempt's new lease expiry (a heartbeat).
func (e *Engine) ExtendRemote(executionID string, until time.Time) {
	e.remoteAttempts.extend(executionID, until)
}

// RemoteAttempts is how many remote attempts this process remembers (their
// spans still open).
func (e *Engine) RemoteAttempts() int {
	e.remoteAttempts.mu.Lock()
	defer e.remoteAttempts.mu.Unlock()
	return len(e.remoteAttempts.m)
}
