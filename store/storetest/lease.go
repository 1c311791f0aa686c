package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

func (s *suite) testLease(t *testing.T) {
	t.Run("HeartbeatExtendsAndCarriesProgress", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "h", Queue: "q", Kind: "k", Progress: backstop.Progress{Total: 5}})
		task := claim(t, b, "q", 1)[0]
		now := b.clock.Now().Add(10 * time.Second)
		res, err := b.store.Heartbeat(b.ctx, []store.Beat{
			{TaskID: "h", ExecutionID: task.ExecutionID, Progress: &backstop.Progress{Total: 5, Completed: 3}},
			{TaskID: "h", ExecutionID: "not-the-lease"},
		}, now, now.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "results", len(res), 2)
		eq(t, "held", res[0].Lost, false)
		eq(t, "wrong execution lost", res[1].Lost, true)
		got := b.get("h")
		eq(t, "lease", *got.LeaseExpiresAt, now.Add(time.Minute))
		eq(t, "progress", got.Progress, backstop.Progress{Total: 5, Completed: 3})

		if _, err := b.c.Cancel(b.ctx, "h"); err != nil {
			t.Fatal(err)
		}
		res, _ = b.store.Heartbeat(b.ctx, []store.Beat{{TaskID: "h", ExecutionID: task.ExecutionID}}, now, now.Add(time.Minute))
		eq(t, "cancel requested", res[0].CancelRequested, true)
	})

	t.Run("StaleSettlementIgnored", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "s", Queue: "q", Kind: "k"})
		task := claim(t, b, "q", 1)[0]
		ok := settle(t, b, store.Settlement{TaskID: "s", ExecutionID: "someone-else", Outcome: backstop.OutcomeSucceeded,
			FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
		eq(t, "stale applied", ok[0], false)
		eq(t, "still running", b.get("s").State, backstop.StateRunning)
		ok = settle(t, b, store.Settlement{TaskID: "s", ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeSucceeded,
			FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
		eq(t, "applied", ok[0], true)
		// Settling the same attempt twice does nothing the second time.
		ok = settle(t, b, store.Settlement{TaskID: "s", ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeTransientError,
			FinishedAt: b.clock.Now(), State: backstop.StatePending, RunAt: b.clock.Now()})
		eq(t, "double settle applied", ok[0], false)
		got := b.get("s")
		eq(t, "state", got.State, backstop.StateSucceeded)
		eq(t, "executions", outcomes(got), []backstop.Outcome{backstop.OutcomeSucceeded})
		eq(t, "execution id", got.Executions[0].ExecutionID, task.ExecutionID)
		eq(t, "execution worker", got.Executions[0].WorkerID, "w-test")
		eq(t, "execution attempt", got.Executions[0].Attempt, 1)
	})

	// A batch of successes larger than one settle statement (stores settle
	// them in chunks) records one execution row per applied attempt, with
	// the attempt's own number, worker, start and finish, and none for the
	// stale settlements among them.
	t.Run("SucceededBatchRecordsEachAttempt", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		const n = 1203
		params := make([]backstop.EnqueueParams, n)
		for i := range params {
			params[i] = backstop.EnqueueParams{ID: fmt.Sprintf("b%04d", i), Queue: "q", Kind: "k"}
		}
		if _, err := b.c.EnqueueMany(b.ctx, params); err != nil {
			t.Fatal(err)
		}
		// b0001 fails once first: its success is its second attempt.
		first := claim(t, b, "q", 2)
		eq(t, "first claim", first[1].ID, "b0001")
		settle(t, b, store.Settlement{TaskID: "b0000", ExecutionID: first[0].ExecutionID, Outcome: backstop.OutcomeSucceeded,
			FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
		settle(t, b, store.Settlement{TaskID: "b0001", ExecutionID: first[1].ExecutionID, Outcome: backstop.OutcomeTransientError,
			Error: "boom", FinishedAt: b.clock.Now(), State: backstop.StatePending, RunAt: b.clock.Now()})
		tasks := claim(t, b, "q", n)
		eq(t, "claimed", len(tasks), n-1)
		stale := map[string]bool{"b0002": true, "b0600": true, "b1202": true}
		ss := make([]store.Settlement, len(tasks))
		finished := map[string]time.Time{}
		for i, task := range tasks {
			fin := b.clock.Now().Add(time.Duration(i) * time.Millisecond).Truncate(time.Microsecond)
			ss[i] = store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeSucceeded,
				FinishedAt: fin, State: backstop.StateSucceeded}
			if stale[task.ID] {
				ss[i].ExecutionID = "not-the-lease"
			}
			finished[task.ID] = fin
		}
		ok := settle(t, b, ss...)
		for i, task := range tasks {
			eq(t, "applied "+task.ID, ok[i], !stale[task.ID])
			ex, err := b.store.Executions(b.ctx, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if stale[task.ID] {
				eq(t, "stale executions "+task.ID, len(ex), 0)
				eq(t, "stale state "+task.ID, b.get(task.ID).State, backstop.StateRunning)
				continue
			}
			want := 1
			if task.ID == "b0001" {
				want = 2
			}
			if len(ex) != want {
				t.Fatalf("%s: %d executions, want %d: %+v", task.ID, len(ex), want, ex)
			}
			e := ex[len(ex)-1]
			eq(t, "execution id "+task.ID, e.ExecutionID, task.ExecutionID)
			eq(t, "attempt "+task.ID, e.Attempt, task.Attempt)
			eq(t, "worker "+task.ID, e.WorkerID, "w-test")
			eq(t, "started "+task.ID, e.StartedAt.Equal(*task.AttemptedAt), true)
			eq(t, "finished "+task.ID, e.FinishedAt != nil && e.FinishedAt.Equal(finished[task.ID]), true)
			eq(t, "outcome "+task.ID, e.Outcome, backstop.OutcomeSucceeded)
		}
		got := b.get("b0001")
		eq(t, "retried outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeTransientError, backstop.OutcomeSucceeded})
		eq(t, "retried attempt", got.Executions[1].Attempt, 2)
	})

	t.Run("ExpiryIsSettledAsLeaseExpired", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{Retry: &backstop.RetryPolicy{Schedule: []backstop.Duration{0}}})
		b.enqueue(backstop.EnqueueParams{ID: "e", Queue: "q", Kind: "k", MaxAttempts: 2})
		first := claim(t, b, "q", 1)[0]
		b.clock.Advance(2 * time.Minute) // past the 1 minute lease
		if err := backstop.Maintain(b.ctx, b.c); err != nil {
			t.Fatal(err)
		}
		got := b.get("e")
		eq(t, "state after expiry", got.State, backstop.StatePending)
		eq(t, "outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeLeaseExpired})
		eq(t, "expired execution", got.Executions[0].ExecutionID, first.ExecutionID)
		// The late worker cannot settle its expired attempt any more.
		ok := settle(t, b, store.Settlement{TaskID: "e", ExecutionID: first.ExecutionID, Outcome: backstop.OutcomeSucceeded,
			FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
		eq(t, "late settle applied", ok[0], false)
		// Second attempt expires too: attempts exhausted.
		second := claim(t, b, "q", 1)[0]
		eq(t, "second attempt", second.Attempt, 2)
		b.clock.Advance(2 * time.Minute)
		if err := backstop.Maintain(b.ctx, b.c); err != nil {
			t.Fatal(err)
		}
		got = b.get("e")
		eq(t, "state", got.State, backstop.StateDead)
		eq(t, "reason", got.DeadReason, backstop.DeadReason("attempts_exhausted"))
		eq(t, "outcomes", outcomes(got), []backstop.Outcome{backstop.OutcomeLeaseExpired, backstop.OutcomeLeaseExpired})
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "p", Queue: "q", Kind: "k"})
		got, err := b.c.Cancel(b.ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "pending canceled at once", got.State, backstop.StateCanceled)
		if _, err := b.c.Cancel(b.ctx, "p"); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("cancel of a canceled task: %v, want conflict", err)
		}
		if _, err := b.c.Cancel(b.ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("cancel of unknown task: %v, want not found", err)
		}
		b.enqueue(backstop.EnqueueParams{ID: "r", Queue: "q", Kind: "k"})
		claim(t, b, "q", 1)
		got, err = b.c.Cancel(b.ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "running stays running until the worker stops", got.State, backstop.StateRunning)
		if got.CancelRequestedAt == nil {
			t.Fatal("cancel not requested")
		}
		// A worker that died: lease expiry settles it as canceled.
		b.clock.Advance(2 * time.Minute)
		if err := backstop.Maintain(b.ctx, b.c); err != nil {
			t.Fatal(err)
		}
		eq(t, "expired canceled task", b.get("r").State, backstop.StateCanceled)
	})
}

func (s *suite) testCancelWinsOverRetry(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.enqueue(backstop.EnqueueParams{ID: "c", Queue: "q", Kind: "k"})
	task := claim(t, b, "q", 1)[0]
	if _, err := b.c.Cancel(b.ctx, "c"); err != nil {
		t.Fatal(err)
	}
	// The worker releases the attempt before it heard of the cancel.
	ok := settle(t, b, store.Settlement{TaskID: "c", ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeReleased,
		FinishedAt: b.clock.Now(), State: backstop.StatePending, RunAt: b.clock.Now(), Uncharged: true})
	eq(t, "applied", ok[0], true)
	got := b.get("c")
	eq(t, "state", got.State, backstop.StateCanceled)
	if got.FinalizedAt == nil {
		t.Fatal("canceled task not finalized")
	}
	eq(t, "claimable", len(claim(t, b, "q", 1)), 0)
}
