package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/ordering"
	"github.com/backstophq/backstop/store"
)

// testOrderingFallback drives store.Ordering's fallback directly (the
// engine calls it only when the ordering state cannot be used): a queue's
// buffered tasks become pending and its workers wake.
func (s *suite) testOrderingFallback(t *testing.T) {
	t.Run("FallbackReleasesBuffered", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		b.ordEnqueue("k", 1)
		b.handleNext(1)
		waiting := b.ordEnqueue("k", 3) // behind the gap at 2
		b.noClaim()
		eq(t, "behind the gap", b.get(waiting.ID).State, backstop.StateBuffered)
		wake := b.store.Wakeups(b.ctx)
		n, err := b.store.OrderingFallback(b.ctx, oq, b.clock.Now())
		if err != nil || n != 1 {
			t.Fatalf("fallback: %d, %v", n, err)
		}
		eq(t, "released", b.get(waiting.ID).State, backstop.StatePending)
		deadline := time.After(10 * time.Second)
		for {
			select {
			case q := <-wake:
				if q == oq {
					return
				}
			case <-deadline:
				t.Fatalf("no wake-up for queue %s after the fallback", oq)
			}
		}
	})
	// The store decides no policy: Order applies the engine's
	// (OrderingSettings.Decide) and refuses settings without one, changing
	// nothing; with internal/ordering.Decide it admits as the engine does.
	t.Run("OrderTakesThePolicyFromTheEngine", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		b.ordEnqueue("k", 1)
		first := b.ordEnqueue("k", 2)
		if _, err := b.store.Order(b.ctx, oq, store.OrderingSettings{Step: 1}, b.clock.Now()); !errors.Is(err, store.ErrNoOrderingPolicy) {
			t.Fatalf("Order without a policy: %v, want ErrNoOrderingPolicy", err)
		}
		eq(t, "untouched without a policy", b.get(first.ID).State, backstop.StateBuffered)
		d, err := b.store.Order(b.ctx, oq, store.OrderingSettings{Step: 1, Decide: ordering.Decide}, b.clock.Now())
		if err != nil || d.Admitted != 1 {
			t.Fatalf("Order with the engine's policy: %+v, %v; want one admitted", d, err)
		}
	})
}
