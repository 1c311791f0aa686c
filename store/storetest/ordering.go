package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// Ordered processing (docs/ordering.md), on the injected clock: ordering
// admission runs when the test calls OrderQueue (as the worker does before
// each claim, and maintenance for due drains).

const oq = "ordered"

func (s *suite) ordBundle(t *testing.T, ord backstop.OrderingConfig) *bundle {
	t.Helper()
	ord.Enabled = true
	b := s.setup(t, &backstop.Config{Queues: map[string]backstop.QueueConfig{oq: {Ordering: ord}}})
	b.clock.freeze()
	return b
}

func (b *bundle) ordEnqueue(key string, seq int64) *backstop.Task {
	b.t.Helper()
	return b.enqueue(backstop.EnqueueParams{Queue: oq, Kind: "result", OrderingKey: key, Sequence: seq,
		Payload: []byte(fmt.Sprintf(`{"key":%q,"seq":%d}`, key, seq))})
}

func (b *bundle) order() {
	b.t.Helper()
	if err := b.c.OrderQueue(b.ctx, oq); err != nil {
		b.t.Fatalf("order: %v", err)
	}
}

// ordClaim orders the queue and claims up to n tasks.
func (b *bundle) ordClaim(n int) []*backstop.Task {
	b.t.Helper()
	b.order()
	return claim(b.t, b, oq, n)
}

func (b *bundle) succeed(task *backstop.Task) {
	b.t.Helper()
	settle(b.t, b, store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeSucceeded,
		FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
}

// seqs returns the sequences of tasks (by their ordering info).
func (b *bundle) seqs(tasks []*backstop.Task) []int64 {
	b.t.Helper()
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	info, err := b.store.OrderingInfo(b.ctx, ids)
	if err != nil {
		b.t.Fatal(err)
	}
	out := []int64{}
	for _, t := range tasks {
		out = append(out, info[t.ID].Sequence)
	}
	return out
}

// handleNext claims exactly one task, checks its sequence and succeeds it.
func (b *bundle) handleNext(want int64) *backstop.Task {
	b.t.Helper()
	ts := b.ordClaim(10)
	if got := b.seqs(ts); len(got) != 1 || got[0] != want {
		b.t.Fatalf("claim: got sequences %v, want [%d]", got, want)
	}
	b.succeed(ts[0])
	return ts[0]
}

func (b *bundle) noClaim() {
	b.t.Helper()
	if ts := b.ordClaim(10); len(ts) != 0 {
		b.t.Fatalf("claim: got sequences %v, want none", b.seqs(ts))
	}
}

// eventsOfType checks that the log holds exactly n final events of typ
// (on Postgres an event is final once older transactions have ended).
func (b *bundle) eventsOfType(typ string, n int) {
	b.t.Helper()
	count := func() int {
		page, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: store.Stream{Kind: store.StreamType, Value: typ}, Limit: 1000})
		if err != nil {
			b.t.Fatal(err)
		}
		return len(page.Events)
	}
	testwait.For(b.t, fmt.Sprintf("%d %s events", n, typ), func() bool { return count() >= n })
	eq(b.t, typ+" events", count(), n)
}

func (s *suite) testOrdering(t *testing.T) {
	t.Run("OneAtATimeInOrder", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		for seq := int64(1); seq <= 3; seq++ {
			b.ordEnqueue("k", seq)
		}
		b.ordEnqueue("other", 7)
		ts := b.ordClaim(10)
		eq(t, "first claim (one per key)", len(ts), 2)
		var k *backstop.Task
		for _, task := range ts {
			if b.seqs([]*backstop.Task{task})[0] == 1 {
				k = task
			}
		}
		if k == nil {
			t.Fatalf("claim: sequence 1 of k not claimed: %v", b.seqs(ts))
		}
		b.noClaim() // k busy, other busy
		b.succeed(k)
		b.handleNext(2)
		b.handleNext(3)
		// A retry keeps the key busy.
		b.ordEnqueue("k", 4)
		b.ordEnqueue("k", 5)
		ts = b.ordClaim(10)
		eq(t, "claim", b.seqs(ts), []int64{4})
		settle(t, b, store.Settlement{TaskID: ts[0].ID, ExecutionID: ts[0].ExecutionID, Outcome: backstop.OutcomeTransientError,
			Error: "boom", FinishedAt: b.clock.Now(), State: backstop.StatePending, RunAt: b.clock.Now()})
		ts = b.ordClaim(10)
		eq(t, "retry claimed before the next sequence", b.seqs(ts), []int64{4})
		b.succeed(ts[0])
		b.handleNext(5)
	})

	t.Run("WaitSaysWhy", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		one := b.ordEnqueue("k", 1)
		eq(t, "a task not yet examined", b.get(one.ID).OrderingWait,
			`held: waiting for ordering admission of key "k", which a worker of queue "ordered" runs before each claim`)
		b.handleNext(1)
		eq(t, "a task that runs does not wait", b.get(one.ID).OrderingWait, "")
		three := b.ordEnqueue("k", 3)
		b.noClaim()
		got := b.get(three.ID)
		want := fmt.Sprintf(`buffered: waiting for sequence 2 of key "k" (last handled 1), next drain at %s`,
			b.clock.Now().Add(10*time.Second).UTC().Format(time.RFC3339))
		eq(t, "a task behind a gap", got.OrderingWait, want)
		eq(t, "its key and sequence", []any{got.OrderingKey, got.Sequence}, []any{"k", int64(3)})
		// In order, behind the key's admitted task.
		r1, r2 := b.ordEnqueue("r", 1), b.ordEnqueue("r", 2)
		b.order()
		eq(t, "a released task", b.get(r2.ID).OrderingWait,
			fmt.Sprintf(`released: waiting for task %s (sequence 1) of key "r" to end`, r1.ID))
	})

	t.Run("UndeclaredQueueIsOrdered", func(t *testing.T) {
		// A client that does not declare a queue (the CLI's database path,
		// a server without a configuration) orders it with the default
		// settings: the keyed tasks a producer wrote are admitted one at a
		// time per key, in sequence order.
		t.Parallel()
		b := s.setup(t, &backstop.Config{})
		b.clock.freeze()
		const q = "undeclared"
		var ids []string
		for _, seq := range []int64{20, 10} {
			ids = append(ids, b.enqueue(backstop.EnqueueParams{Queue: q, Kind: "result", OrderingKey: "k", Sequence: seq}).ID)
		}
		if err := b.c.OrderQueue(b.ctx, q); err != nil {
			t.Fatal(err)
		}
		ts := claim(t, b, q, 10)
		eq(t, "claimed (one per key)", len(ts), 1)
		eq(t, "the lower sequence first", ts[0].ID, ids[1])
		b.succeed(ts[0])
		if err := b.c.OrderQueue(b.ctx, q); err != nil {
			t.Fatal(err)
		}
		ts = claim(t, b, q, 10)
		eq(t, "then the next", len(ts), 1)
		eq(t, "the next", ts[0].ID, ids[0])
	})

	t.Run("StaleDropped", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		b.ordEnqueue("k", 5)
		b.handleNext(5)
		dup := b.ordEnqueue("k", 5)
		old := b.ordEnqueue("k", 3)
		b.noClaim()
		for _, task := range []*backstop.Task{dup, old} {
			got := b.get(task.ID)
			eq(t, "stale state", got.State, backstop.StateCanceled)
			if !strings.HasPrefix(got.LastError, "stale: ") {
				t.Fatalf("stale last_error: %q", got.LastError)
			}
		}
		eq(t, "stale counter", b.c.OrderingStats().Stale.Load(), int64(2))
		b.eventsOfType(store.EventOrderingStale, 2)
		b.ordEnqueue("k", 6)
		b.handleNext(6)
	})

	t.Run("GapBufferedAndBufferingMode", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		b.ordEnqueue("k", 1)
		b.handleNext(1)
		three := b.ordEnqueue("k", 3)
		b.noClaim()
		eq(t, "gap task state", b.get(three.ID).State, backstop.StateBuffered)
		eq(t, "buffered counter", b.c.OrderingStats().Buffered.Load(), int64(1))
		eq(t, "drain scheduled", b.c.OrderingStats().DrainScheduled.Load(), int64(1))
		// Buffering mode: 2 is next in order, but the key buffers.
		two := b.ordEnqueue("k", 2)
		b.noClaim()
		eq(t, "in-order task in buffering mode", b.get(two.ID).State, backstop.StateBuffered)
		eq(t, "buffered counter", b.c.OrderingStats().Buffered.Load(), int64(2))
		b.eventsOfType(store.EventOrderingBuffered, 2)
		b.clock.Advance(9 * time.Second)
		b.noClaim()
		b.clock.Advance(time.Second) // the drain is due: releases 2, 3 in order
		b.handleNext(2)
		b.handleNext(3)
		eq(t, "released", b.c.OrderingStats().Released.Load(), int64(2))
		eq(t, "cleared", b.c.OrderingStats().Cleared.Load(), int64(1))
		eq(t, "no gaps reported", b.c.OrderingStats().GapsReported.Load(), int64(0))
		b.ordEnqueue("k", 4) // no longer buffering
		b.handleNext(4)
	})

	t.Run("DrainBackoffResetsOnProgress", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1, Backoff: []time.Duration{10 * time.Second, 20 * time.Second}})
		b.ordEnqueue("k", 1)
		b.handleNext(1)
		b.ordEnqueue("k", 3)
		b.ordEnqueue("k", 5)
		b.noClaim()
		b.clock.Advance(10 * time.Second) // no progress: step 1, next in 20s
		b.noClaim()
		b.ordEnqueue("k", 2)
		b.clock.Advance(20 * time.Second) // progress: 2, 3 released, backoff reset to 10s
		b.handleNext(2)
		b.handleNext(3)
		b.noClaim()
		eq(t, "timeouts before the reset schedule is used up", b.c.OrderingStats().Timeouts.Load(), int64(0))
		b.clock.Advance(10 * time.Second) // step 1 again
		b.noClaim()
		eq(t, "timeouts", b.c.OrderingStats().Timeouts.Load(), int64(0))
		b.clock.Advance(20 * time.Second) // used up: give up, 5 released with gap 4
		ts := b.ordClaim(10)
		eq(t, "claim", b.seqs(ts), []int64{5})
		info, err := b.store.OrderingInfo(b.ctx, []string{ts[0].ID})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "gaps", info[ts[0].ID].Gaps, []backstop.Gap{{From: 4, To: 4}})
		eq(t, "timeouts", b.c.OrderingStats().Timeouts.Load(), int64(1))
		eq(t, "drain rescheduled", b.c.OrderingStats().DrainRescheduled.Load(), int64(3))
	})

	t.Run("GiveUpReportsGaps", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1}) // default schedule 10,20,30,60,60
		b.ordEnqueue("k", 1)
		b.handleNext(1)
		b.ordEnqueue("k", 4)
		b.ordEnqueue("k", 5)
		b.ordEnqueue("k", 8)
		b.noClaim() // buffered; the drain is scheduled
		for _, d := range []time.Duration{10, 20, 30, 60} {
			b.clock.Advance(d * time.Second)
			b.noClaim()
		}
		eq(t, "timeouts before the last step", b.c.OrderingStats().Timeouts.Load(), int64(0))
		b.clock.Advance(60 * time.Second)
		want := map[int64][]backstop.Gap{4: {{From: 2, To: 3}}, 5: nil, 8: {{From: 6, To: 7}}}
		for _, seq := range []int64{4, 5, 8} {
			ts := b.ordClaim(10)
			eq(t, "claim", b.seqs(ts), []int64{seq})
			info, err := b.store.OrderingInfo(b.ctx, []string{ts[0].ID})
			if err != nil {
				t.Fatal(err)
			}
			eq(t, fmt.Sprintf("gaps of %d", seq), info[ts[0].ID].Gaps, want[seq])
			b.succeed(ts[0])
		}
		st := b.c.OrderingStats()
		eq(t, "timeouts", st.Timeouts.Load(), int64(1))
		eq(t, "gaps reported", st.GapsReported.Load(), int64(2))
		b.eventsOfType(store.EventOrderingGapReported, 2)
		b.eventsOfType(store.EventOrderingTimeout, 1)
		b.eventsOfType(store.EventOrderingReleased, 3)
		b.ordEnqueue("k", 9)
		b.handleNext(9)
	})

	t.Run("CircuitBreaker", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1, CircuitBreaker: 3})
		b.ordEnqueue("k", 1)
		b.handleNext(1)
		b.ordEnqueue("k", 3)
		b.ordEnqueue("k", 5)
		b.noClaim()
		b.ordEnqueue("k", 7) // the buffer reaches 3: everything released at once
		for _, seq := range []int64{3, 5, 7} {
			b.handleNext(seq)
		}
		eq(t, "circuit breaker", b.c.OrderingStats().CircuitBreaker.Load(), int64(1))
		eq(t, "gaps reported", b.c.OrderingStats().GapsReported.Load(), int64(3))
		b.eventsOfType(store.EventOrderingCircuitBreaker, 1)
		eq(t, "timeouts", b.c.OrderingStats().Timeouts.Load(), int64(0))
	})

	t.Run("KeyTTL", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1, KeyTTL: time.Hour})
		b.ordEnqueue("k", 1)
		b.handleNext(1)
		b.clock.Advance(50 * time.Minute)
		b.ordEnqueue("k", 2)
		b.handleNext(2) // activity extends the TTL
		b.clock.Advance(50 * time.Minute)
		stale := b.ordEnqueue("k", 2)
		b.noClaim()
		eq(t, "stale within the extended TTL", b.get(stale.ID).State, backstop.StateCanceled)
		b.clock.Advance(61 * time.Minute)
		b.order() // the expired key state is removed
		b.ordEnqueue("k", 1)
		b.handleNext(1) // a fresh key: not stale
	})

	t.Run("ConcurrentClaimersOneAtATimePerKey", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		const keys, per = 3, 12
		for seq := int64(1); seq <= per; seq++ {
			for k := 0; k < keys; k++ {
				b.ordEnqueue(fmt.Sprintf("k%d", k), seq)
			}
		}
		var (
			mu       sync.Mutex
			running  = map[string]bool{}
			handled  = map[string][]int64{}
			failures []string
			wg       sync.WaitGroup
		)
		total := 0
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for idle := 0; idle < 200; {
					if err := b.c.OrderQueue(b.ctx, oq); err != nil {
						mu.Lock()
						failures = append(failures, err.Error())
						mu.Unlock()
						return
					}
					ts, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: oq, WorkerID: fmt.Sprint("w", w), Max: 2,
						Now: b.clock.Now(), Lease: time.Minute})
					if err != nil {
						mu.Lock()
						failures = append(failures, err.Error())
						mu.Unlock()
						return
					}
					if len(ts) == 0 {
						mu.Lock()
						done := total == keys*per
						mu.Unlock()
						if done {
							return
						}
						idle++
						time.Sleep(time.Millisecond)
						continue
					}
					ids := make([]string, len(ts))
					for i, t := range ts {
						ids[i] = t.ID
					}
					info, err := b.store.OrderingInfo(b.ctx, ids)
					if err != nil {
						mu.Lock()
						failures = append(failures, err.Error())
						mu.Unlock()
						return
					}
					mu.Lock()
					for _, t := range ts {
						in := info[t.ID]
						if running[in.Key] {
							failures = append(failures, fmt.Sprintf("key %s: %d claimed while another task runs", in.Key, in.Sequence))
						}
						running[in.Key] = true
						handled[in.Key] = append(handled[in.Key], in.Sequence)
					}
					mu.Unlock()
					for _, t := range ts {
						mu.Lock()
						running[info[t.ID].Key] = false
						total++
						mu.Unlock()
						// Half the workers settle through the engine (the
						// key's next turn in the settle), half straight to
						// the store (left to the admission sweep): both race.
						settleFn := b.store.Settle
						if w%2 == 1 {
							settleFn = b.c.Engine().Settle
						}
						if _, err := settleFn(b.ctx, []store.Settlement{{TaskID: t.ID, ExecutionID: t.ExecutionID,
							Outcome: backstop.OutcomeSucceeded, FinishedAt: b.clock.Now(), State: backstop.StateSucceeded}}); err != nil {
							mu.Lock()
							failures = append(failures, err.Error())
							mu.Unlock()
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("failures: %v", failures)
		}
		want := make([]int64, per)
		for i := range want {
			want[i] = int64(i + 1)
		}
		for k := 0; k < keys; k++ {
			eq(t, fmt.Sprintf("k%d handled", k), handled[fmt.Sprintf("k%d", k)], want)
		}
	})

	// Seed 001's race: a drain finishes while a new task of the key arrives.
	// The new task must be neither lost nor stranded in the buffer.
	t.Run("DrainRacesArrival", func(t *testing.T) {
		if len(s.beginTx) == 0 {
			t.Skip("driver offers no caller transaction")
		}
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
		b.ordEnqueue("k", 1)
		b.handleNext(1)
		b.ordEnqueue("k", 3)
		b.noClaim()
		b.ordEnqueue("k", 2) // fills the gap; the drain will clear the buffer
		b.clock.Advance(10 * time.Second)

		tx, commit, _, err := s.beginTx[0].begin(b.ctx, b.store)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.c.EnqueueTx(b.ctx, tx, backstop.EnqueueParams{Queue: oq, Kind: "result", OrderingKey: "k", Sequence: 4})
		if err != nil {
			t.Fatal(err)
		}
		four := res[0]
		if b.store.Features().ConcurrentWriters {
			// The drain runs and commits while the arrival is uncommitted.
			b.order()
			eq(t, "the drain ended buffering before the arrival committed", b.c.OrderingStats().Cleared.Load(), int64(1))
			if err := commit(); err != nil {
				t.Fatal(err)
			}
		} else {
			// One writer: the drain waits for the arrival's commit.
			done := make(chan error, 1)
			go func() { done <- b.c.OrderQueue(b.ctx, oq) }()
			if err := commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		b.handleNext(2)
		b.handleNext(3)
		b.handleNext(4)
		eq(t, "4 succeeded", b.get(four.Task.ID).State, backstop.StateSucceeded)
		b.noClaim()
	})

	t.Run("SettleAdmitsTheKeysNext", s.ordSettleAdmitsNext) // ordering_settle.go
	t.Run("WorkerSeesGaps", func(t *testing.T) {
		t.Parallel()
		b := s.ordBundle(t, backstop.OrderingConfig{Step: 1, Backoff: []time.Duration{time.Second}})
		var (
			mu   sync.Mutex
			seen []string
		)
		b.worker(&backstop.WorkerConfig{Queues: map[string]int{oq: 4}}, map[string]backstop.Handler{
			"result": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, fmt.Sprintf("%s:%d%v", task.OrderingKey, task.Sequence, backstop.Gaps(ctx)))
				return nil
			}),
		})
		one := b.ordEnqueue("k", 1)
		b.waitState(one.ID, backstop.StateSucceeded)
		three := b.ordEnqueue("k", 3)
		b.waitState(three.ID, backstop.StateBuffered)
		testwait.For(t, "the drain scheduled", func() bool { return b.c.OrderingStats().DrainScheduled.Load() == 1 })
		b.clock.Advance(2 * time.Second) // the one-step schedule is used up at the next poll
		b.waitState(three.ID, backstop.StateSucceeded)
		mu.Lock()
		defer mu.Unlock()
		eq(t, "handled", seen, []string{"k:1[]", "k:3[{2 2}]"})
	})

	s.testOrderingHold(t)     // ordering_hold.go
	s.testOrderingOps(t)      // ordering_ops.go
	s.testOrderingFallback(t) // ordering_fallback.go
	s.testOrderingKeys(t)     // ordering_keys.go
	s.testOrderedQueues(t)    // ordering_keys.go

	t.Run("NotOrderedQueueRejectsKey", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{Queues: map[string]backstop.QueueConfig{"plain": {Concurrency: 1}}})
		_, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "plain", Kind: "x", OrderingKey: "k", Sequence: 1})
		if err == nil || !strings.Contains(err.Error(), "ordering") {
			t.Fatalf("enqueue with ordering key on a plain queue: %v", err)
		}
		eq(t, "nothing written", b.count(), 0)
	})
}
