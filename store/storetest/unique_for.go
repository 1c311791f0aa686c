package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// testUniqueFor: idempotency keys with a window (unique per period), on a
// frozen clock: within the window an enqueue returns the first task
// whatever its state; past it a new task takes the key, even while the
// old one still waits; bad windows write nothing; concurrent enqueues of
// one key past a window make one task.
func (s *suite) testUniqueFor(t *testing.T) {
	t.Run("Window", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.clock.freeze()
		p := backstop.EnqueueParams{Queue: "uq", Kind: "k", IdempotencyKey: "daily", UniqueFor: time.Hour}
		r, err := b.c.Enqueue(b.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		a := r.Task
		if r.Duplicate || a.UniqueUntil == nil || !a.UniqueUntil.Equal(b.clock.Now().Add(time.Hour)) {
			t.Fatalf("first enqueue: duplicate %v, unique_until %v; want a new task held for an hour", r.Duplicate, a.UniqueUntil)
		}
		if got := b.get(a.ID); got.UniqueUntil == nil || !got.UniqueUntil.Equal(*a.UniqueUntil) {
			t.Fatalf("stored unique_until %v, want %v", got.UniqueUntil, a.UniqueUntil)
		}

		b.clock.Advance(30 * time.Minute)
		b.uniqueDup(p, a.ID, backstop.StatePending)
		claimAndSucceed(t, b, "uq", 1)
		// Done, the task still holds its key for the rest of its window.
		b.clock.Advance(29 * time.Minute)
		b.uniqueDup(p, a.ID, backstop.StateSucceeded)
		// A plain enqueue of the key meets the window too.
		b.uniqueDup(backstop.EnqueueParams{Queue: "uq", Kind: "k", IdempotencyKey: "daily"}, a.ID, backstop.StateSucceeded)

		// The window is measured from the first task's enqueue: an hour.
		b.clock.Advance(time.Minute)
		r, err = b.c.Enqueue(b.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if r.Duplicate || r.Task.ID == a.ID {
			t.Fatalf("past the window: duplicate %v, task %s; want a new task", r.Duplicate, r.Task.ID)
		}
		second := r.Task

		// Past the second's window while it still waits: a third task,
		// both live with the key.
		b.clock.Advance(time.Hour + time.Second)
		r, err = b.c.Enqueue(b.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if r.Duplicate || r.Task.ID == second.ID {
			t.Fatalf("past the second window: duplicate %v, task %s; want a third task", r.Duplicate, r.Task.ID)
		}
		eq(t, "second task's state", b.get(second.ID).State, backstop.StatePending)
		eq(t, "tasks", b.count(), 3)
	})

	t.Run("PlainKeyHeldByLiveTask", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.clock.freeze()
		plain := b.enqueue(backstop.EnqueueParams{Queue: "uq", Kind: "k", IdempotencyKey: "x"})
		// A windowed enqueue meets the live task that holds the key
		// without a window.
		b.uniqueDup(backstop.EnqueueParams{Queue: "uq", Kind: "k", IdempotencyKey: "x", UniqueFor: time.Minute},
			plain.ID, backstop.StatePending)
	})

	t.Run("BadWindow", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for _, p := range []backstop.EnqueueParams{
			{Queue: "uq", Kind: "k", IdempotencyKey: "x", UniqueFor: -time.Second},
			{Queue: "uq", Kind: "k", UniqueFor: time.Hour}, // no key
		} {
			_, err := b.c.Enqueue(b.ctx, p)
			var ve *backstop.ValidationError
			if !errors.As(err, &ve) || ve.Field != "unique_for" {
				t.Fatalf("unique_for %s, key %q: %v, want a validation error naming unique_for", p.UniqueFor, p.IdempotencyKey, err)
			}
		}
		eq(t, "tasks written", b.count(), 0)
	})

	t.Run("ConcurrentPastWindow", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.clock.freeze()
		p := backstop.EnqueueParams{Queue: "uq", Kind: "k", IdempotencyKey: "c", UniqueFor: time.Minute}
		old := b.enqueue(p)
		b.clock.Advance(2 * time.Minute) // the old task still waits, its window closed
		const n = 8
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := b.c.Enqueue(b.ctx, p)
				if err != nil {
					t.Error(err)
					return
				}
				ids[i] = r.Task.ID
			}()
		}
		wg.Wait()
		for _, id := range ids {
			if id == old.ID || id != ids[0] {
				t.Fatalf("concurrent enqueues past the window got tasks %v (old %s); want one new task", ids, old.ID)
			}
		}
		ts, err := b.store.List(b.ctx, store.ListFilter{IdempotencyKey: "c", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "tasks with the key", len(ts), 2)
	})
}

// uniqueDup enqueues p and requires the duplicate answer: task id in state.
func (b *bundle) uniqueDup(p backstop.EnqueueParams, id string, state backstop.State) {
	b.t.Helper()
	r, err := b.c.Enqueue(b.ctx, p)
	if err != nil {
		b.t.Fatal(err)
	}
	if !r.Duplicate || r.Task.ID != id || r.Task.State != state {
		b.t.Fatalf("enqueue in the window: duplicate %v, task %s %s; want duplicate of %s %s",
			r.Duplicate, r.Task.ID, r.Task.State, id, state)
	}
}
