package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// ordSettleAdmitsNext: a settle batch that ends a key's busy task (through
// the engine's Settle) admits the key's next released task in its own
// transaction: it is claimable with no admission run in between. A retry
// keeps the key busy, a gap still buffers, and a dead letter frees its
// key as a success does.
func (s *suite) ordSettleAdmitsNext(t *testing.T) {
	t.Parallel()
	b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
	for seq := int64(1); seq <= 3; seq++ {
		b.ordEnqueue("k", seq)
	}
	b.ordEnqueue("j", 1)
	b.ordEnqueue("j", 2)
	ts := b.ordClaim(10)
	eq(t, "first claim (one per key)", len(ts), 2)
	keyOf := func(task *backstop.Task) string {
		t.Helper()
		info, err := b.store.OrderingInfo(b.ctx, []string{task.ID})
		if err != nil {
			t.Fatal(err)
		}
		return info[task.ID].Key
	}
	byKey := map[string]*backstop.Task{}
	for _, task := range ts {
		byKey[keyOf(task)] = task
	}
	if byKey["k"] == nil || byKey["j"] == nil {
		t.Fatalf("first claim: want k and j, got %v", b.seqs(ts))
	}
	engineSettle := func(ss ...store.Settlement) {
		t.Helper()
		oks, err := b.c.Engine().Settle(b.ctx, ss)
		if err != nil {
			t.Fatalf("settle: %v", err)
		}
		for i, ok := range oks {
			if !ok {
				t.Fatalf("settlement %d not applied", i)
			}
		}
	}
	admitted := b.c.OrderingStats().Admitted.Load()
	k1, j1 := byKey["k"], byKey["j"]
	engineSettle(store.Settlement{TaskID: k1.ID, ExecutionID: k1.ExecutionID, Outcome: backstop.OutcomeSucceeded,
		FinishedAt: b.clock.Now(), State: backstop.StateSucceeded},
		store.Settlement{TaskID: j1.ID, ExecutionID: j1.ExecutionID, Outcome: backstop.OutcomePermanentError, Error: "refused",
			FinishedAt: b.clock.Now(), State: backstop.StateDead, DeadReason: backstop.ReasonPermanentError})
	eq(t, "admitted by the settle", b.c.OrderingStats().Admitted.Load()-admitted, int64(2))
	// No OrderQueue: the store's claim alone finds the keys' next tasks.
	ts = claim(t, b, oq, 10)
	eq(t, "claimed after the settle, no admission run", b.seqs(ts), []int64{2, 2})
	var k2 *backstop.Task
	for _, task := range ts {
		if keyOf(task) == "k" {
			k2 = task
		}
	}
	// A retry keeps the key busy: nothing of k is admitted.
	engineSettle(store.Settlement{TaskID: k2.ID, ExecutionID: k2.ExecutionID, Outcome: backstop.OutcomeTransientError,
		Error: "boom", FinishedAt: b.clock.Now(), State: backstop.StatePending, RunAt: b.clock.Now()})
	ts = claim(t, b, oq, 10)
	eq(t, "the retry, not k's next", b.seqs(ts), []int64{2})
	// A gap still buffers: k's 5 waits for 4 while 3 runs and after.
	b.ordEnqueue("k", 5)
	engineSettle(store.Settlement{TaskID: ts[0].ID, ExecutionID: ts[0].ExecutionID, Outcome: backstop.OutcomeSucceeded,
		FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
	ts = claim(t, b, oq, 10)
	eq(t, "k's 3 admitted by the settle", b.seqs(ts), []int64{3})
	b.order() // judges the new 5: buffered behind the gap
	engineSettle(store.Settlement{TaskID: ts[0].ID, ExecutionID: ts[0].ExecutionID, Outcome: backstop.OutcomeSucceeded,
		FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
	b.noClaim()
	b.eventsOfType(store.EventOrderingBuffered, 1)
	b.ordEnqueue("k", 4)
	b.clock.Advance(10 * time.Second) // the drain: 4 and 5 released in order
	b.handleNext(4)
	b.handleNext(5)
}
