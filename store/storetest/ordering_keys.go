package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// The operator's read of a queue's ordering keys (store.Ordering.OrderingKeys).

func (s *suite) testOrderingKeys(t *testing.T) {
	t.Run("KeysListedWithBufferedCountsAndPaged", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		list := func(after string, limit int) []store.OrderingKeyInfo {
			t.Helper()
			ks, err := b.store.OrderingKeys(b.ctx, oq, after, limit)
			if err != nil {
				t.Fatalf("ordering keys after %q: %v", after, err)
			}
			return ks
		}
		keys := func(ks []store.OrderingKeyInfo) []string {
			out := []string{}
			for _, k := range ks {
				out = append(out, k.Key)
			}
			return out
		}
		eq(t, "keys of a queue with none", keys(list("", 10)), []string{})

		a1 := b.ordEnqueue("a", 1)
		b1 := b.ordEnqueue("b", 1)
		ts := b.ordClaim(10)
		eq(t, "claimed (one per key)", len(ts), 2)
		for _, task := range ts {
			if task.ID == b1.ID {
				b.succeed(task)
			}
		}
		b.ordEnqueue("b", 3) // a gap: 3 and 4 buffered
		b.ordEnqueue("b", 4)
		b.noClaim()
		b.ordEnqueue("c", 7) // not examined yet: no state

		ks := list("", 10)
		eq(t, "keys", keys(ks), []string{"a", "b", "c"})
		a, bk, c := ks[0], ks[1], ks[2]
		eq(t, "a busy task", a.BusyTaskID, a1.ID)
		if a.BusySequence == nil || *a.BusySequence != 1 || a.LastSequence != nil {
			t.Fatalf("a: busy sequence %v, last %v; want 1 and none", a.BusySequence, a.LastSequence)
		}
		if a.ExpiresAt == nil || a.DrainDueAt != nil {
			t.Fatalf("a: expires %v, drain due %v; want a time and none", a.ExpiresAt, a.DrainDueAt)
		}
		eq(t, "b buffered", bk.Buffered, 2)
		eq(t, "b busy", bk.BusyTaskID, "")
		if bk.LastSequence == nil || *bk.LastSequence != 1 {
			t.Fatalf("b: last sequence %v, want 1", bk.LastSequence)
		}
		if bk.DrainDueAt == nil || !bk.DrainDueAt.Equal(b.clock.Now().Add(10*time.Second)) {
			t.Fatalf("b: drain due %v, want %v", bk.DrainDueAt, b.clock.Now().Add(10*time.Second))
		}
		eq(t, "c held", c.Held, 1)
		eq(t, "c buffered", c.Buffered, 0)
		if c.ExpiresAt != nil || c.LastSequence != nil {
			t.Fatalf("c: expires %v, last %v; want none (no state yet)", c.ExpiresAt, c.LastSequence)
		}

		// The cursor: two a page.
		eq(t, "first page", keys(list("", 2)), []string{"a", "b"})
		eq(t, "second page", keys(list("b", 2)), []string{"c"})
		eq(t, "after the last", keys(list("c", 2)), []string{})

		// a's task ends: before the next admission looks, the read counts
		// its sequence as handled, as admission will.
		for _, task := range ts {
			if task.ID == a1.ID {
				b.succeed(task)
			}
		}
		a = list("", 1)[0]
		if a.BusyTaskID != "" || a.LastSequence == nil || *a.LastSequence != 1 {
			t.Fatalf("a after its task: busy %q, last %v; want none and 1", a.BusyTaskID, a.LastSequence)
		}

		eq(t, "keys of an unknown queue", len(func() []store.OrderingKeyInfo {
			ks, err := b.store.OrderingKeys(b.ctx, "nosuchqueue", "", 10)
			if err != nil {
				t.Fatal(err)
			}
			return ks
		}()), 0)
		if _, err := b.store.OrderingKeys(b.ctx, oq, "", store.MaxOrderingKeys+1); err == nil {
			t.Fatal("a limit over the maximum: no error")
		}
		if _, err := b.c.OrderingKeys(b.ctx, oq, "", 0); err != nil {
			t.Fatalf("client, default limit: %v", err)
		}
		if _, err := b.c.OrderingKeys(b.ctx, oq, "", -1); err == nil {
			t.Fatal("client, negative limit: no error")
		}
	})
}

// The queues an operator is offered on the Ordering page
// (store.Ordering.OrderedQueues): those holding a key's state or a task
// waiting by its key, declared or not, and no others.
func (s *suite) testOrderedQueues(t *testing.T) {
	t.Run("OrderedQueuesAreThoseWithKeys", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		ordered := func(label string, want ...string) {
			t.Helper()
			got, err := b.store.OrderedQueues(b.ctx)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			if want == nil {
				want = []string{}
			}
			eq(t, label, got, want)
		}
		b.enqueue(backstop.EnqueueParams{Queue: "plain", Kind: "k"})
		ordered("no key anywhere")
		a1 := b.ordEnqueue("a", 1) // waiting, no key state yet
		ordered("a task waiting by its key", oq)
		b.enqueue(backstop.EnqueueParams{Queue: "alpha", Kind: "k", OrderingKey: "x", Sequence: 1})
		ordered("an undeclared queue whose task has a key", "alpha", oq)
		ts := b.ordClaim(10) // a's state written, its task admitted and running
		eq(t, "claimed", len(ts), 1)
		eq(t, "claimed a1", ts[0].ID, a1.ID)
		ordered("a key with a state and a busy task", "alpha", oq)
		b.succeed(ts[0])
		ordered("a key with a state, nothing waiting", "alpha", oq)
	})
}
