package engine

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/backstophq/backstop/store"
)

// ExpiredSettled records the attempts Maintain settled as lease_expired,
// each only when its settlement applied (another maintenance loop, or the
// worker itself, may have settled it first): backstop_attempts_total and
// the duration from the attempt's start, the retry or dead letter that
// followed, and the end of the attempt's span when this process handed the
// attempt to a remote worker (remote_attempts.go). An in-process worker's
// span is its own: it ends it when it learns the lease is lost.
func (e *Engine) ExpiredSettled(ctx context.Context, tasks []*Task, ss []store.Settlement, oks []bool) {
	for i := range ss {
		if i >= len(oks) || !oks[i] {
			continue
		}
		t := tasks[i]
		var ra *remoteAttempt
		if t.ExecutionID != "" {
			ra = e.remoteAttempts.take(t.ExecutionID)
		}
		var span trace.Span
		if ra != nil {
			span = ra.span
		}
		e.Telemetry.Settled(span, t, attemptStart(t, ss[i].FinishedAt), &ss[i])
	}
}

// DeadlinesSettled counts the waiting tasks Maintain dead-lettered because
// their deadline passed (reason expired): they had no attempt running, so
// only backstop_dead_letters_total moves.
func (e *Engine) DeadlinesSettled(ctx context.Context, tasks []*Task, ss []store.Settlement, oks []bool) {
	for i := range ss {
		if i < len(oks) && oks[i] {
			e.Telemetry.DeadLettered(ctx, tasks[i], string(ss[i].DeadReason))
			e.Telemetry.deadlineEvent(ctx, tasks[i], &ss[i])
		}
	}
}
