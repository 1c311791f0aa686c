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

// testReplayStore drives store.DLQ's Replay directly, where the engine
// never goes: a copy under an id that is taken, a copy that breaks a key,
// and the wake-up a replay to pending sends once it commits.
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
}
