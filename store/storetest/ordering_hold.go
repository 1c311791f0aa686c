package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// Ordered processing, second part (docs/ordering.md): the first hold of a
// key without state.

func (s *suite) testOrderingHold(t *testing.T) {
	t.Run("FirstHoldOrdersAnOvertakenPredecessor", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1, FirstHold: time.Minute})
		two := b.ordEnqueue("k", 2) // a fresh key: held, not admitted
		b.noClaim()
		eq(t, "held task state", b.get(two.ID).State, backstop.StateBuffered)
		b.clock.Advance(30 * time.Second)
		b.ordEnqueue("k", 1) // the overtaken predecessor arrives within the hold
		b.ordEnqueue("k", 3)
		b.noClaim()
		b.clock.Advance(29 * time.Second)
		b.noClaim()
		b.clock.Advance(time.Second) // the hold ends: 1, 2, 3 in order, no gap
		for seq := int64(1); seq <= 3; seq++ {
			task := b.handleNext(seq)
			info, err := b.store.OrderingInfo(b.ctx, []string{task.ID})
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "gaps", len(info[task.ID].Gaps), 0)
		}
		st := b.c.OrderingStats()
		eq(t, "first held", st.FirstHeld.Load(), int64(3))
		eq(t, "buffered (includes the held)", st.Buffered.Load(), int64(3))
		eq(t, "released", st.Released.Load(), int64(3))
		eq(t, "stale", st.Stale.Load(), int64(0))
		eq(t, "drains (the hold is none)", st.DrainScheduled.Load(), int64(0))
		eq(t, "cleared", st.Cleared.Load(), int64(0))
		b.eventsOfType(store.EventOrderingBuffered, 3)
		// The key has state now: no hold.
		b.ordEnqueue("k", 4)
		b.handleNext(4)
		eq(t, "first held after the key has state", b.c.OrderingStats().FirstHeld.Load(), int64(3))
	})

	t.Run("FirstHoldThenGap", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1, FirstHold: time.Minute, Backoff: []time.Duration{10 * time.Second}})
		b.ordEnqueue("k", 5)
		b.ordEnqueue("k", 7)
		b.noClaim()
		b.clock.Advance(time.Minute) // 5 released (what came before it is no gap); 7 waits for 6
		b.handleNext(5)
		b.noClaim()
		eq(t, "drain scheduled for the gap", b.c.OrderingStats().DrainScheduled.Load(), int64(1))
		b.clock.Advance(10 * time.Second) // the one-step schedule is used up: 7 with gap 6
		ts := b.ordClaim(10)
		eq(t, "claim", b.seqs(ts), []int64{7})
		info, err := b.store.OrderingInfo(b.ctx, []string{ts[0].ID})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "gaps", info[ts[0].ID].Gaps, []backstop.Gap{{From: 6, To: 6}})
		eq(t, "gaps reported", b.c.OrderingStats().GapsReported.Load(), int64(1))
		eq(t, "timeouts", b.c.OrderingStats().Timeouts.Load(), int64(1))
	})

	t.Run("FirstHoldAgainAfterKeyTTL", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1, FirstHold: time.Minute, KeyTTL: time.Hour})
		b.ordEnqueue("k", 1)
		b.noClaim() // the hold starts when admission first sees the task
		b.clock.Advance(time.Minute)
		b.handleNext(1)
		b.clock.Advance(61 * time.Minute) // the key's state is forgotten
		b.order()
		b.ordEnqueue("k", 9)
		b.noClaim()
		b.ordEnqueue("k", 8)
		b.clock.Advance(time.Minute)
		b.handleNext(8)
		b.handleNext(9)
		eq(t, "first held", b.c.OrderingStats().FirstHeld.Load(), int64(3))
		eq(t, "stale", b.c.OrderingStats().Stale.Load(), int64(0))
	})

	t.Run("FirstHoldCircuitBreaker", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1, FirstHold: time.Minute, CircuitBreaker: 3})
		b.ordEnqueue("k", 1)
		b.ordEnqueue("k", 2)
		b.noClaim()
		b.ordEnqueue("k", 4) // the buffer reaches 3 during the hold: released at once
		b.handleNext(1)
		b.handleNext(2)
		ts := b.ordClaim(10)
		eq(t, "claim", b.seqs(ts), []int64{4})
		info, err := b.store.OrderingInfo(b.ctx, []string{ts[0].ID})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "gaps", info[ts[0].ID].Gaps, []backstop.Gap{{From: 3, To: 3}})
		eq(t, "circuit breaker", b.c.OrderingStats().CircuitBreaker.Load(), int64(1))
	})

	t.Run("NoFirstHoldOvertakenFirstIsStale", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		b.ordEnqueue("k", 2)
		b.handleNext(2) // admitted at once
		one := b.ordEnqueue("k", 1)
		b.noClaim()
		eq(t, "the overtaken first task", b.get(one.ID).State, backstop.StateCanceled)
	})
}
