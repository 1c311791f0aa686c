package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Causes that end an attempt's context (context.Cause); Decide classifies
// by them.
var (
	ErrTimeout   = errors.New("task timeout")
	ErrDeadline  = errors.New("task deadline passed")
	ErrAbandoned = errors.New("handler did not return after its context ended; attempt settled without it")
	// ErrTaskCanceled: the task was canceled while it ran — by an operator,
	// or by the cancel of its workflow run.
	ErrTaskCanceled = errors.New("task canceled by operator")
)

// Report is how one attempt ended, wherever it ran (an in-process handler,
// a program run by `backstop work`, a remote worker).
type Report struct {
	Task *Task // its ID, ExecutionID, Attempt, MaxAttempts, Deadline, Timeout, Queue and Kind count
	// Err is what the work returned: nil is a success.
	Err error
	// Cause is why the attempt's context ended (ErrTimeout, ErrDeadline,
	// ErrTaskCanceled; ErrAbandoned: the work never returned); nil: it did
	// not end.
	Cause error
	// Result is the attempt's JSON result, kept on success; ResultErr, when
	// set, is why the result it tried to record was refused: the attempt
	// then fails with it.
	Result    json.RawMessage
	ResultErr error
	Progress  *Progress
	Detail    string // the error's detail (a stack, stderr's tail)
}

// Decide turns how an attempt ended into the task's next state: a success;
// canceled; dead (permanent error, poison, deadline passed, attempts used
// up); or retried by the task's retry policy (snoozed by RetryAfter,
// uncharged).
func (e *Engine) Decide(r Report) store.Settlement {
	t, res, cause := r.Task, r.Err, r.Cause
	now := e.Now()
	s := store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, FinishedAt: now, Progress: r.Progress, ErrorDetail: r.Detail,
		TraceParent: t.TraceParent, Queue: t.Queue}
	if res == nil && !errors.Is(cause, ErrAbandoned) {
		if r.ResultErr == nil {
			s.Outcome, s.State, s.Result = bt.OutcomeSucceeded, bt.StateSucceeded, r.Result
			return s
		}
		res = r.ResultErr // a Permanent error: the attempt fails below
	}
	// Declared after the success return: errors.As makes them escape, and
	// most attempts succeed.
	var ra *retryAfterError
	var poison *poisonError
	switch {
	case errors.Is(cause, ErrTaskCanceled):
		s.Outcome, s.State, s.Error = bt.OutcomeCanceled, bt.StateCanceled, "canceled by operator"
	case errors.Is(cause, ErrDeadline):
		s.Outcome, s.State, s.DeadReason = bt.OutcomeTimeout, bt.StateDead, bt.ReasonExpired
		s.Error = "deadline passed during the attempt"
	case errors.Is(cause, ErrTimeout):
		s.Outcome = bt.OutcomeTimeout
		s.Error = fmt.Sprintf("attempt timed out after %s", time.Duration(t.Timeout))
		if errors.Is(res, ErrAbandoned) {
			s.ErrorDetail = ErrAbandoned.Error()
		}
		e.RetryOrDie(&s, t, now)
	case errors.As(res, &ra):
		s.Outcome, s.Uncharged, s.Error = bt.OutcomeSnoozed, true, res.Error()
		s.RunAt, s.State = now.Add(ra.d), bt.StateScheduled
		if ra.d == 0 {
			s.State = bt.StatePending
		}
		if t.Deadline != nil && s.RunAt.After(*t.Deadline) {
			s.State, s.DeadReason = bt.StateDead, bt.ReasonExpired
		}
	case errors.As(res, &poison):
		s.Outcome, s.State, s.DeadReason, s.Error = bt.OutcomePermanentError, bt.StateDead, bt.ReasonPoison, res.Error()
	case IsPermanent(res):
		s.Outcome, s.State, s.DeadReason, s.Error = bt.OutcomePermanentError, bt.StateDead, bt.ReasonPermanentError, res.Error()
	default:
		s.Outcome, s.Error = bt.OutcomeTransientError, res.Error()
		e.RetryOrDie(&s, t, now)
	}
	return s
}

// RetryOrDie schedules the next attempt by policy, or dead-letters the task
// when its attempts are used up or its deadline would pass.
func (e *Engine) RetryOrDie(s *store.Settlement, t *Task, now time.Time) {
	if t.Attempt >= t.MaxAttempts {
		s.State, s.DeadReason = bt.StateDead, bt.ReasonAttemptsExhausted
		return
	}
	delay := e.cfg.retryFor(t).Delay(t.Attempt, rand.Float64())
	s.RunAt = now.Add(delay).Truncate(time.Microsecond)
	if t.Deadline != nil && s.RunAt.After(*t.Deadline) {
		s.State, s.DeadReason = bt.StateDead, bt.ReasonExpired
		return
	}
	s.State = bt.StateScheduled
	if delay <= 0 {
		s.State = bt.StatePending
	}
}

// NoHandler decides an attempt no handler could run (its kind is unknown
// to the worker): it waits, uncharged, for a worker that knows the kind,
// until grace since the task's creation has passed; then it is poison.
func (e *Engine) NoHandler(t *Task, grace time.Duration) store.Settlement {
	now := e.Now()
	msg := fmt.Sprintf("no handler registered for kind %q", t.Kind)
	s := store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, FinishedAt: now, Error: msg, TraceParent: t.TraceParent,
		Queue: t.Queue}
	if now.Sub(t.CreatedAt) >= grace {
		s.Outcome, s.State, s.DeadReason = bt.OutcomePermanentError, bt.StateDead, bt.ReasonPoison
		return s
	}
	s.Outcome, s.Uncharged = bt.OutcomeSnoozed, true
	s.RunAt = now.Add(min(grace/10+time.Second, 30*time.Second))
	s.State = bt.StateScheduled
	return s
}
