package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
)

func sched(ds ...time.Duration) *backstop.RetryPolicy {
	p := &backstop.RetryPolicy{}
	for _, d := range ds {
		p.Schedule = append(p.Schedule, backstop.Duration(d))
	}
	return p
}

func (s *suite) testWorker(t *testing.T) {
	t.Run("SuccessWithProgress", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.worker(nil, map[string]backstop.Handler{"k": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
			backstop.ReportProgress(ctx, 3, 3)
			return nil
		})})
		b.enqueue(backstop.EnqueueParams{ID: "ok", Queue: "default", Kind: "k", Progress: backstop.Progress{Total: 3}})
		got := b.waitState("ok", backstop.StateSucceeded)
		eq(t, "outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeSucceeded})
		eq(t, "progress", got.Progress, backstop.Progress{Total: 3, Completed: 3})
		e := got.Executions[0]
		if e.FinishedAt == nil || e.FinishedAt.Before(e.StartedAt) || e.WorkerID == "" {
			t.Fatalf("execution not recorded fully: %+v", e)
		}
	})

	t.Run("RetryScheduleThenSuccess", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		var calls atomic.Int32
		b.worker(nil, map[string]backstop.Handler{"flaky": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
			backstop.ReportProgress(ctx, int(calls.Add(1)), 10)
			if task.Attempt < 3 {
				return fmt.Errorf("flaky failure %d", task.Attempt)
			}
			return nil
		})})
		b.enqueue(backstop.EnqueueParams{ID: "f", Queue: "default", Kind: "flaky", MaxAttempts: 5, Retry: sched(100*time.Millisecond, 300*time.Millisecond)})
		got := b.waitState("f", backstop.StateSucceeded)
		eq(t, "outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeTransientError, backstop.OutcomeTransientError, backstop.OutcomeSucceeded})
		eq(t, "attempt", got.Attempt, 3)
		eq(t, "error kept", got.Executions[1].Error, "flaky failure 2")
		for i, want := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond} {
			gap := got.Executions[i+1].StartedAt.Sub(*got.Executions[i].FinishedAt)
			if gap < want {
				t.Fatalf("retry %d ran after %s, schedule says %s", i+1, gap, want)
			}
		}
		eq(t, "attempt numbers", []int{got.Executions[0].Attempt, got.Executions[1].Attempt, got.Executions[2].Attempt}, []int{1, 2, 3})
		eq(t, "progress carried across retries", got.Progress.Completed, 3)
	})

	t.Run("RetryPolicyPrecedence", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{
			Retry:  sched(time.Hour),
			Queues: map[string]backstop.QueueConfig{"default": {Retry: sched(2 * time.Hour)}},
			Kinds:  map[string]backstop.KindConfig{"bykind": {Retry: sched(3 * time.Hour)}},
		})
		fail := backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return errors.New("no") })
		b.worker(&backstop.WorkerConfig{Queues: map[string]int{"default": 5, "plain": 5}},
			map[string]backstop.Handler{"byqueue": fail, "bykind": fail, "bytask": fail})
		b.enqueue(backstop.EnqueueParams{ID: "client", Queue: "plain", Kind: "bytask"})
		b.enqueue(backstop.EnqueueParams{ID: "queue", Queue: "default", Kind: "byqueue"})
		b.enqueue(backstop.EnqueueParams{ID: "kind", Queue: "default", Kind: "bykind"})
		b.enqueue(backstop.EnqueueParams{ID: "task", Queue: "default", Kind: "bytask", Retry: sched(4 * time.Hour)})
		for id, want := range map[string]time.Duration{"client": time.Hour, "queue": 2 * time.Hour, "kind": 3 * time.Hour, "task": 4 * time.Hour} {
			got := b.waitState(id, backstop.StateScheduled)
			eq(t, id+" delay", got.RunAt.Sub(*got.Executions[0].FinishedAt), want)
		}
	})

	t.Run("AttemptsExhausted", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.worker(nil, map[string]backstop.Handler{"bad": backstop.HandlerFunc(func(context.Context, *backstop.Task) error {
			return errors.New("upstream 503")
		})})
		b.enqueue(backstop.EnqueueParams{ID: "x", Queue: "default", Kind: "bad", MaxAttempts: 3, Retry: sched(0)})
		got := b.waitState("x", backstop.StateDead)
		eq(t, "reason", got.DeadReason, backstop.DeadReason("attempts_exhausted"))
		eq(t, "outcomes", len(got.Executions), 3)
		eq(t, "dead count", got.DeadCount, 1)
		eq(t, "dlq status", string(got.DLQStatus), "open")
		eq(t, "last error", got.LastError, "upstream 503")
		if got.FirstSeen == nil || got.LastSeen == nil {
			t.Fatal("first_seen/last_seen not set")
		}
	})

	t.Run("PermanentAndPoison", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		type order struct {
			Amount int `json:"amount"`
		}
		b.worker(&backstop.WorkerConfig{NoHandlerGrace: 300 * time.Millisecond}, map[string]backstop.Handler{
			"perm": backstop.HandlerFunc(func(context.Context, *backstop.Task) error {
				return backstop.Permanent(errors.New("card declined"))
			}),
			"typed": backstop.Typed(func(ctx context.Context, task *backstop.Task, o order) error { return nil }),
			"http":  backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return backstop.ClassifyHTTPStatus(404) }),
		})
		b.enqueue(backstop.EnqueueParams{ID: "perm", Queue: "default", Kind: "perm", MaxAttempts: 5})
		b.enqueue(backstop.EnqueueParams{ID: "good", Queue: "default", Kind: "typed", Payload: []byte(`{"amount":5}`)})
		b.enqueue(backstop.EnqueueParams{ID: "poison", Queue: "default", Kind: "typed", Payload: []byte(`{"amount":"five"}`), MaxAttempts: 5})
		b.enqueue(backstop.EnqueueParams{ID: "404", Queue: "default", Kind: "http", MaxAttempts: 5})
		b.enqueue(backstop.EnqueueParams{ID: "orphan", Queue: "default", Kind: "nobody-handles-this", MaxAttempts: 5})

		got := b.waitState("perm", backstop.StateDead)
		eq(t, "perm reason", got.DeadReason, backstop.DeadReason("permanent_error"))
		eq(t, "perm outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomePermanentError})
		eq(t, "perm error", got.LastError, "card declined")
		b.waitState("good", backstop.StateSucceeded)
		got = b.waitState("poison", backstop.StateDead)
		eq(t, "poison reason", got.DeadReason, backstop.DeadReason("poison"))
		eq(t, "poison attempts", len(got.Executions), 1)
		got = b.waitState("404", backstop.StateDead)
		eq(t, "http 404 reason", got.DeadReason, backstop.DeadReason("permanent_error"))
		got = b.waitState("orphan", backstop.StateDead)
		eq(t, "no handler reason", got.DeadReason, backstop.DeadReason("poison"))
		if !strings.Contains(got.LastError, "no handler") {
			t.Fatalf("no-handler error: %q", got.LastError)
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.worker(nil, map[string]backstop.Handler{"slow": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
			<-ctx.Done()
			return ctx.Err()
		})})
		b.enqueue(backstop.EnqueueParams{ID: "t", Queue: "default", Kind: "slow", Timeout: 100 * time.Millisecond, MaxAttempts: 2, Retry: sched(0)})
		got := b.waitState("t", backstop.StateDead)
		eq(t, "outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeTimeout, backstop.OutcomeTimeout})
		eq(t, "reason", got.DeadReason, backstop.DeadReason("attempts_exhausted"))
	})

	t.Run("DeadlineAcrossAttempts", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.worker(nil, map[string]backstop.Handler{"k": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
			return errors.New("again")
		})})
		// The next retry would start after the deadline: the task dies as expired.
		b.enqueue(backstop.EnqueueParams{ID: "d", Queue: "default", Kind: "k", Deadline: b.clock.Now().Add(time.Minute), Retry: sched(time.Hour)})
		got := b.waitState("d", backstop.StateDead)
		eq(t, "reason", got.DeadReason, backstop.DeadReason("expired"))
		eq(t, "outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeTransientError})
		// A deadline reached during an attempt ends it.
		b.worker(&backstop.WorkerConfig{Queues: map[string]int{"q2": 1}}, map[string]backstop.Handler{"hang": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
			<-ctx.Done()
			return ctx.Err()
		})})
		b.enqueue(backstop.EnqueueParams{ID: "d2", Queue: "q2", Kind: "hang", Deadline: b.clock.Now().Add(300 * time.Millisecond)})
		got = b.waitState("d2", backstop.StateDead)
		eq(t, "reason", got.DeadReason, backstop.DeadReason("expired"))
		eq(t, "outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeTimeout})
	})

	t.Run("RetryAfterIsNotAFailure", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.worker(nil, map[string]backstop.Handler{"later": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
			if len(task.Executions) == 0 && task.Attempt == 1 && task.LastError == "" {
				return backstop.RetryAfter(100 * time.Millisecond)
			}
			return nil
		})})
		b.enqueue(backstop.EnqueueParams{ID: "r", Queue: "default", Kind: "later", MaxAttempts: 1})
		got := b.waitState("r", backstop.StateSucceeded)
		eq(t, "outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeSnoozed, backstop.OutcomeSucceeded})
		eq(t, "attempt not charged", got.Attempt, 1)
	})

	t.Run("CancelRunning", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		started := make(chan struct{})
		b.worker(&backstop.WorkerConfig{Lease: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond},
			map[string]backstop.Handler{"long": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})})
		b.enqueue(backstop.EnqueueParams{ID: "c", Queue: "default", Kind: "long"})
		<-started
		if _, err := b.c.Cancel(b.ctx, "c"); err != nil {
			t.Fatal(err)
		}
		got := b.waitState("c", backstop.StateCanceled)
		eq(t, "outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeCanceled})
	})

	t.Run("PanicIsTransientWithStack", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.worker(nil, map[string]backstop.Handler{"boom": backstop.HandlerFunc(func(context.Context, *backstop.Task) error {
			panic("kaboom")
		})})
		b.enqueue(backstop.EnqueueParams{ID: "p", Queue: "default", Kind: "boom", MaxAttempts: 1})
		got := b.waitState("p", backstop.StateDead)
		eq(t, "outcome", outcomes(got), []backstop.Outcome{backstop.OutcomeTransientError})
		if !strings.Contains(got.Executions[0].Error, "kaboom") || !strings.Contains(got.Executions[0].ErrorDetail, "goroutine") {
			t.Fatalf("panic not recorded with stack: %+v", got.Executions[0])
		}
	})

	t.Run("GracefulStopReleasesWithoutCharging", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		started := make(chan struct{}, 4)
		w, err := backstop.NewWorker(b.c, &backstop.WorkerConfig{Queues: map[string]int{"default": 4}, PollInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("quick", backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return nil }))
		w.Handle("stuck", backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
			backstop.ReportProgress(ctx, 1, 4)
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}))
		b.enqueue(backstop.EnqueueParams{ID: "q1", Queue: "default", Kind: "quick"})
		b.enqueue(backstop.EnqueueParams{ID: "s1", Queue: "default", Kind: "stuck", Progress: backstop.Progress{Total: 4}})
		if err := w.Start(b.ctx); err != nil {
			t.Fatal(err)
		}
		<-started
		b.waitState("q1", backstop.StateSucceeded)
		ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		got := b.get("s1")
		eq(t, "released state", got.State, backstop.StatePending)
		eq(t, "attempt not charged", got.Attempt, 0)
		eq(t, "outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeReleased})
		eq(t, "progress kept", got.Progress, backstop.Progress{Total: 4, Completed: 1})
		// Another worker picks it up as attempt 1.
		b.worker(nil, map[string]backstop.Handler{"stuck": backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return nil })})
		got = b.waitState("s1", backstop.StateSucceeded)
		eq(t, "attempt", got.Attempt, 1)
	})
}
