package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop"
)

// Ordered processing and the operations around it (docs/ordering.md):
// retention.

func (s *suite) testOrderingOps(t *testing.T) {
	t.Run("RetentionDeletesOrderingRowsAndIdleKeys", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{
			Queues: map[string]backstop.QueueConfig{oq: {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1,
				KeyTTL: time.Hour}}},
			Retention: backstop.RetentionConfig{Succeeded: time.Minute, Canceled: time.Minute}})
		one := b.ordEnqueue("k", 1)
		b.handleNext(1)
		stale := b.ordEnqueue("k", 1) // canceled as stale
		b.noClaim()
		two := b.ordEnqueue("k", 2)
		b.handleNext(2)
		b.ordEnqueue("other", 5)
		b.handleNext(5)
		info, err := b.store.OrderingInfo(b.ctx, []string{one.ID, stale.ID, two.ID})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "ordering rows before retention", len(info), 3)

		b.clock.Advance(2 * time.Minute)
		res, err := backstop.Retain(b.ctx, b.c)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "succeeded deleted", res.Succeeded, 3)
		eq(t, "canceled deleted", res.Canceled, 1)
		eq(t, "keys deleted (none expired)", res.OrderingKeys, 0)
		info, err = b.store.OrderingInfo(b.ctx, []string{one.ID, stale.ID, two.ID})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "ordering rows after retention", len(info), 0)
		// The key state outlives its tasks until it expires: 2 is stale.
		old := b.ordEnqueue("k", 2)
		b.noClaim()
		eq(t, "stale after retention", b.get(old.ID).State, backstop.StateCanceled)

		b.clock.Advance(61 * time.Minute) // both keys expire and are idle
		res, err = backstop.Retain(b.ctx, b.c)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "keys deleted", res.OrderingKeys, 2)
		eq(t, "canceled deleted", res.Canceled, 1)
		b.ordEnqueue("k", 1) // the key starts afresh
		b.handleNext(1)
	})

	t.Run("RetentionKeepsBusyAndBufferingKeys", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{
			Queues: map[string]backstop.QueueConfig{oq: {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1,
				KeyTTL: time.Minute, Backoff: []time.Duration{time.Hour}}}},
			Retention: backstop.RetentionConfig{Succeeded: time.Minute, Canceled: time.Minute}})
		b.ordEnqueue("busy", 1)
		running := b.ordClaim(10) // busy: its task runs
		eq(t, "claimed", len(running), 1)
		b.ordEnqueue("buf", 1)
		b.handleNext(1)
		b.ordEnqueue("buf", 3) // buffering behind 2, drain in an hour
		b.noClaim()
		b.clock.Advance(10 * time.Minute) // both key states are past their TTL
		res, err := backstop.Retain(b.ctx, b.c)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "keys deleted", res.OrderingKeys, 0)
		b.ordEnqueue("buf", 2) // fills the gap: the buffer is still known
		b.succeed(running[0])
		b.clock.Advance(time.Hour)
		got := b.ordClaim(10)
		eq(t, "released in order after the drain", b.seqs(got), []int64{2})
	})
}
