package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Ordered processing and the operations around it (docs/ordering.md):
// retention, dead letters and their replay.

// die dead-letters a claimed task.
func (b *bundle) die(task *backstop.Task) {
	b.t.Helper()
	settle(b.t, b, store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: backstop.OutcomePermanentError,
		Error: "bad", FinishedAt: b.clock.Now(), State: backstop.StateDead, DeadReason: bt.ReasonPermanentError})
}

// claimOne orders the queue, claims exactly one task and returns it with
// its sequence.
func (b *bundle) claimOne() (*backstop.Task, int64) {
	b.t.Helper()
	ts := b.ordClaim(10)
	if len(ts) != 1 {
		b.t.Fatalf("claim: got sequences %v, want one task", b.seqs(ts))
	}
	return ts[0], b.seqs(ts)[0]
}

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

	t.Run("DeadLetterFreesItsKey", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		b.ordEnqueue("k", 1)
		b.ordEnqueue("k", 2)
		one, seq := b.claimOne()
		eq(t, "first", seq, int64(1))
		b.noClaim()
		b.die(one)
		b.handleNext(2) // the next sequence proceeds
		stale := b.ordEnqueue("k", 1)
		b.noClaim()
		eq(t, "the dead letter's sequence counts as handled", b.get(stale.ID).State, backstop.StateCanceled)
	})

	t.Run("ReplayWaitsForItsKeyAndIsNotStale", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		b.ordEnqueue("k", 1)
		one, _ := b.claimOne()
		b.die(one)
		b.ordEnqueue("k", 2)
		b.ordEnqueue("k", 3)
		two, seq := b.claimOne()
		eq(t, "next after the dead letter", seq, int64(2))
		// Replayed under its original id while 2 runs: it waits for the key.
		r, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: one.ID, Actor: "op"})
		if err != nil || !r.Replayed {
			t.Fatalf("replay: %+v, %v", r, err)
		}
		eq(t, "replayed task state", b.get(one.ID).State, backstop.StateBuffered)
		b.noClaim()
		b.succeed(two)
		// The key is free: the replay runs first (out of sequence order, by
		// the operator's decision), then 3; nothing is stale.
		again, seq := b.claimOne()
		eq(t, "the replay", again.ID, one.ID)
		eq(t, "its sequence", seq, int64(1))
		b.noClaim()
		b.succeed(again)
		b.handleNext(3)
		eq(t, "stale", b.c.OrderingStats().Stale.Load(), int64(0))
		// The replay did not move the key back: 3 is still the last.
		b.ordEnqueue("k", 4)
		b.handleNext(4)
		eq(t, "gaps reported", b.c.OrderingStats().GapsReported.Load(), int64(0))
		b.eventsOfType(store.EventOrderingGapReported, 0)
	})

	// Issue 17 item 4: key k with 1 (dies), 2 and 3 waiting. The dead
	// letter frees the key (2 runs); the replay of 1 waits for 2, runs
	// before 3, and holds 3 until it settles; its success closes the hole
	// its dead letter left (ordering.gap_closed on its history), its
	// second death closes nothing and frees the key again.
	t.Run("ReplayHoldsTheKeyAndClosesItsGap", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		b.ordEnqueue("k", 1)
		b.ordEnqueue("k", 2)
		b.ordEnqueue("k", 3)
		one, _ := b.claimOne()
		b.die(one)
		two, seq := b.claimOne()
		eq(t, "next after the dead letter", seq, int64(2))
		r, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: one.ID, Actor: "op"})
		if err != nil || !r.Replayed {
			t.Fatalf("replay: %+v, %v", r, err)
		}
		b.noClaim() // 2 still runs
		b.succeed(two)
		again, seq := b.claimOne() // in front of 3
		eq(t, "the replay", again.ID, one.ID)
		eq(t, "its sequence", seq, int64(1))
		b.noClaim() // 3 is held while the replay runs
		b.die(again)
		b.eventsOfType(store.EventOrderingGapClosed, 0)
		eq(t, "gaps closed", b.c.OrderingStats().GapsClosed.Load(), int64(0))
		three, seq := b.claimOne() // the replay settled (dead): 3 proceeds
		eq(t, "after the replay died", seq, int64(3))
		b.eventsOfType(store.EventOrderingGapClosed, 0)
		// Replayed again while 3 runs; it succeeds this time.
		if r, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: one.ID, Actor: "op"}); err != nil || !r.Replayed {
			t.Fatalf("second replay: %+v, %v", r, err)
		}
		b.ordEnqueue("k", 4)
		b.succeed(three)
		again, _ = b.claimOne()
		eq(t, "the second replay, in front of 4", again.ID, one.ID)
		b.noClaim() // 4 is held
		b.succeed(again)
		b.handleNext(4)
		b.eventsOfType(store.EventOrderingGapClosed, 1)
		eq(t, "gaps closed", b.c.OrderingStats().GapsClosed.Load(), int64(1))
		page, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: store.Stream{Kind: store.StreamType, Value: store.EventOrderingGapClosed}, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		ev := page.Events[0]
		eq(t, "gap_closed subject", ev.Subject, one.ID)
		eq(t, "gap_closed kind", ev.Kind, one.Kind)
		eq(t, "gap_closed body", string(ev.Body), `{"key":"k","from":1,"to":1}`)
		hist, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: store.Stream{Kind: store.StreamTask, Value: one.ID}, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var closed int
		for _, e := range hist.Events {
			if e.Type == store.EventOrderingGapClosed {
				closed++
			}
		}
		eq(t, "gap_closed in the replay's history", closed, 1)
		eq(t, "stale", b.c.OrderingStats().Stale.Load(), int64(0))
	})

	t.Run("ReplayNewIDWaitsForItsKey", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		b.ordEnqueue("k", 1)
		one, _ := b.claimOne()
		b.die(one)
		b.ordEnqueue("k", 2)
		two, _ := b.claimOne()
		r, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: one.ID, Actor: "op", NewID: true})
		if err != nil || !r.Replayed {
			t.Fatalf("replay: %+v, %v", r, err)
		}
		cp := r.Task
		if cp == nil || cp.ID == one.ID {
			t.Fatalf("replay --new-id: %+v", r)
		}
		eq(t, "copy state", b.get(cp.ID).State, backstop.StateBuffered)
		b.noClaim()
		b.succeed(two)
		again, seq := b.claimOne()
		eq(t, "the copy", again.ID, cp.ID)
		eq(t, "its sequence", seq, int64(1))
		info, err := b.store.OrderingInfo(b.ctx, []string{cp.ID})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "the copy's key", info[cp.ID].Key, "k")
		b.succeed(again)
		b.ordEnqueue("k", 3)
		b.handleNext(3)
		eq(t, "stale", b.c.OrderingStats().Stale.Load(), int64(0))
	})

	t.Run("RedriveWaitsForKeysOneAtATime", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		for seq := int64(1); seq <= 3; seq++ {
			b.ordEnqueue("k", seq)
			task, _ := b.claimOne()
			b.die(task)
		}
		b.ordEnqueue("k", 4)
		four, _ := b.claimOne()
		prog, err := b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: oq}, Actor: "op"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "redriven", prog.Replayed, 3)
		b.noClaim() // 4 still runs
		b.succeed(four)
		for _, want := range []int64{1, 2, 3} { // one at a time, by sequence
			task, seq := b.claimOne()
			eq(t, "redriven sequence", seq, want)
			b.noClaim()
			b.succeed(task)
		}
		b.ordEnqueue("k", 5)
		b.handleNext(5)
		eq(t, "stale", b.c.OrderingStats().Stale.Load(), int64(0))
	})
}
