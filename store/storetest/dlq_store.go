package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// testReplayStore drives store.DLQ directly where the engine never goes: a
// copy under an id that is taken, a copy that breaks a key, the wake-up a
// replay to pending sends once it commits, and a purge in batches smaller
// than what it deletes.
func (s *suite) testReplayStore(t *testing.T) {
	plan := func(b *bundle, newID string) func(*bt.Task) (*store.ReplayPlan, error) {
		now := b.clock.Now()
		return func(*bt.Task) (*store.ReplayPlan, error) {
			return &store.ReplayPlan{NewID: newID, State: bt.StatePending, RunAt: now, Now: now}, nil
		}
	}

	t.Run("CopyUnderTakenID", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		before := b.dead(backstop.EnqueueParams{ID: "orig", Queue: "q", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{ID: "taken", Queue: "q", Kind: "k"})
		_, err := b.store.Replay(b.ctx, "orig", plan(b, "taken"))
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `a task with id "taken" already exists`) {
			t.Fatalf("copy under a taken id: %v", err)
		}
		unchanged(t, before, b.get("orig"))
	})

	t.Run("CopyBreaksKey", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		before := b.dead(backstop.EnqueueParams{ID: "idem", Queue: "q", Kind: "k", IdempotencyKey: "key-1"})
		b.enqueue(backstop.EnqueueParams{ID: "holder", Queue: "q", Kind: "k", IdempotencyKey: "key-1"})
		_, err := b.store.Replay(b.ctx, "idem", plan(b, "fresh"))
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "would break a uniqueness rule") {
			t.Fatalf("copy breaking a key: %v", err)
		}
		unchanged(t, before, b.get("idem"))
		if _, err := b.store.Get(b.ctx, "fresh"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the copy was kept: %v", err)
		}
	})

	t.Run("WakesQueue", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.dead(backstop.EnqueueParams{ID: "w", Queue: "wq", Kind: "k"})
		wake := b.store.Wakeups(b.ctx)
		if _, err := b.store.Replay(b.ctx, "w", plan(b, "")); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(10 * time.Second)
		for {
			select {
			case q := <-wake:
				if q == "wq" {
					return
				}
			case <-deadline:
				t.Fatal("no wake-up for queue wq after a replay to pending")
			}
		}
	})

	t.Run("PurgeInBatches", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for _, id := range []string{"p1", "p2", "p3", "kept"} {
			b.dead(backstop.EnqueueParams{ID: id, Queue: "q", Kind: "k"})
		}
		for _, id := range []string{"p1", "p2", "p3"} {
			if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: id, Reason: "obsolete"}); err != nil {
				t.Fatal(err)
			}
		}
		p := store.PurgeParams{Before: b.clock.Now().Add(time.Hour), Statuses: []bt.DLQStatus{bt.DLQDiscarded}, Limit: 2}
		dry := p
		dry.DryRun = true
		n, err := b.store.PurgeDLQ(b.ctx, dry)
		if err != nil || n != 3 {
			t.Fatalf("dry run: %d, %v", n, err)
		}
		n, err = b.store.PurgeDLQ(b.ctx, p)
		if err != nil || n != 3 {
			t.Fatalf("purge in batches of 2: %d, %v", n, err)
		}
		for _, id := range []string{"p1", "p2", "p3"} {
			if _, err := b.store.Get(b.ctx, id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s survived the purge: %v", id, err)
			}
		}
		eq(t, "open dead letter kept", b.get("kept").State, backstop.StateDead)
	})
}
