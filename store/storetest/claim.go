package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

func claim(t *testing.T, b *bundle, queue string, n int) []*backstop.Task {
	t.Helper()
	ts, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: queue, WorkerID: "w-test", Max: n, Now: b.clock.Now(), Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return ts
}

func settle(t *testing.T, b *bundle, ss ...store.Settlement) []bool {
	t.Helper()
	ok, err := b.store.Settle(b.ctx, ss)
	if err != nil {
		t.Fatalf("settle: %v", err)
	}
	return ok
}

func claimAndSucceed(t *testing.T, b *bundle, queue string, n int) {
	t.Helper()
	for _, task := range claim(t, b, queue, n) {
		settle(t, b, store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeSucceeded,
			FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
	}
}

func (s *suite) testClaim(t *testing.T) {
	t.Run("OrderAndLease", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "low", Queue: "q", Kind: "k", Priority: -1})
		b.enqueue(backstop.EnqueueParams{ID: "old", Queue: "q", Kind: "k"})
		b.clock.Advance(time.Millisecond)
		b.enqueue(backstop.EnqueueParams{ID: "new", Queue: "q", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{ID: "high", Queue: "q", Kind: "k", Priority: 5})
		b.enqueue(backstop.EnqueueParams{ID: "later", Queue: "q", Kind: "k", Delay: time.Hour})
		b.enqueue(backstop.EnqueueParams{ID: "elsewhere", Queue: "other", Kind: "k"})
		now := b.clock.Now()
		got, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "q", WorkerID: "w1", Max: 10, Now: now, Lease: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, task := range got {
			ids = append(ids, task.ID)
			eq(t, "state", task.State, backstop.StateRunning)
			eq(t, "attempt", task.Attempt, 1)
			eq(t, "worker", task.WorkerID, "w1")
			if task.ExecutionID == "" || task.LeaseExpiresAt == nil || !task.LeaseExpiresAt.Equal(now.Add(30*time.Second)) {
				t.Fatalf("lease not set: %+v", task)
			}
		}
		eq(t, "claim order", ids, []string{"high", "old", "new", "low"})
		eq(t, "nothing left", len(claim(t, b, "q", 10)), 0)
		// A second claim of the same task gets a new execution id.
		b.clock.Advance(2 * time.Hour)
		if _, err := b.store.PromoteScheduled(b.ctx, b.clock.Now(), 100); err != nil {
			t.Fatal(err)
		}
		later := claim(t, b, "q", 10)
		eq(t, "scheduled task claimable once due", len(later), 1)
		eq(t, "scheduled id", later[0].ID, "later")
	})

	t.Run("Kinds", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "a", Queue: "q", Kind: "ka"})
		b.enqueue(backstop.EnqueueParams{ID: "b", Queue: "q", Kind: "kb"})
		got, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "q", Kinds: []string{"kb"}, WorkerID: "w", Max: 10, Now: b.clock.Now(), Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].ID != "b" {
			t.Fatalf("kind filter claimed %v", got)
		}
	})

	t.Run("NoDoubleClaimUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		const total = 2000
		params := make([]backstop.EnqueueParams, total)
		for i := range params {
			params[i] = backstop.EnqueueParams{Queue: "race", Kind: "k"}
		}
		if _, err := b.c.EnqueueMany(b.ctx, params); err != nil {
			t.Fatal(err)
		}
		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
			errs = make(chan error, 8)
		)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					got, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "race", WorkerID: "w" + itoa(w), Max: 25, Now: b.clock.Now(), Lease: time.Minute})
					if err != nil {
						errs <- err
						return
					}
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, task := range got {
						seen[task.ID]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		eq(t, "distinct tasks claimed", len(seen), total)
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("task %s claimed %d times", id, n)
			}
		}
	})

	t.Run("PastDeadlineNotClaimed", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "d", Queue: "q", Kind: "k", Deadline: b.clock.Now().Add(time.Minute)})
		b.clock.Advance(2 * time.Minute)
		eq(t, "claimed", len(claim(t, b, "q", 10)), 0)
		if err := backstop.Maintain(b.ctx, b.c); err != nil {
			t.Fatal(err)
		}
		got := b.get("d")
		eq(t, "state", got.State, backstop.StateDead)
		eq(t, "reason", got.DeadReason, backstop.DeadReason("expired"))
	})
}
