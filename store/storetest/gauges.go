package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// testGauges: the metrics' store-derived gauges (store/gauges.go) — tasks
// by queue and state, dead letters by queue and DLQ status, the oldest
// pending run_at and the oldest running lease per queue — from one query.
func (s *suite) testGauges(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	gr, ok := b.store.(store.GaugeReader)
	if !ok {
		t.Fatalf("the %s store does not implement store.GaugeReader", b.store.Driver())
	}
	g, err := gr.Gauges(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Tasks)+len(g.DeadLetters)+len(g.OldestPending)+len(g.OldestLease) != 0 {
		t.Fatalf("empty store: gauges %+v", g)
	}

	now := b.clock.Now()
	early := now.Add(-time.Hour)
	// gq-a: two pending (one due an hour ago), one scheduled in the future.
	b.enqueue(backstop.EnqueueParams{Queue: "gq-a", Kind: "k", RunAt: early})
	b.enqueue(backstop.EnqueueParams{Queue: "gq-a", Kind: "k", RunAt: now.Add(-time.Minute)})
	b.enqueue(backstop.EnqueueParams{Queue: "gq-a", Kind: "k", RunAt: now.Add(time.Hour)})
	// gq-b: two running (claimed at different times), three dead, one of
	// them discarded.
	b.enqueue(backstop.EnqueueParams{Queue: "gq-b", Kind: "k", RunAt: early})
	first, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "gq-b", WorkerID: "w", Max: 1, Now: now.Add(-10 * time.Minute), Lease: time.Hour})
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v %d", err, len(first))
	}
	b.enqueue(backstop.EnqueueParams{Queue: "gq-b", Kind: "k", RunAt: now})
	if got, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "gq-b", WorkerID: "w", Max: 1, Now: now, Lease: time.Hour}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %d", err, len(got))
	}
	var dead []*backstop.Task
	for _, id := range []string{"gauge-d1", "gauge-d2", "gauge-d3"} {
		dead = append(dead, b.dead(backstop.EnqueueParams{ID: id, Queue: "gq-b", Kind: "k"}))
	}
	if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: dead[0].ID, Reason: "test"}); err != nil {
		t.Fatal(err)
	}

	g, err = gr.Gauges(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "tasks gq-a pending", g.Tasks["gq-a"][bt.StatePending], 2)
	eq(t, "tasks gq-a scheduled", g.Tasks["gq-a"][bt.StateScheduled], 1)
	eq(t, "tasks gq-b running", g.Tasks["gq-b"][bt.StateRunning], 2)
	eq(t, "tasks gq-b dead", g.Tasks["gq-b"][bt.StateDead], 3)
	eq(t, "queues with tasks", len(g.Tasks), 2)
	eq(t, "dead letters gq-b open", g.DeadLetters["gq-b"][bt.DLQOpen], 2)
	eq(t, "dead letters gq-b discarded", g.DeadLetters["gq-b"][bt.DLQDiscarded], 1)
	eq(t, "queues with dead letters", len(g.DeadLetters), 1)
	eq(t, "oldest pending gq-a", g.OldestPending["gq-a"], early)
	if _, ok := g.OldestPending["gq-b"]; ok {
		t.Errorf("gq-b has no pending task but an oldest pending time %v", g.OldestPending["gq-b"])
	}
	eq(t, "oldest lease gq-b", g.OldestLease["gq-b"], now.Add(-10*time.Minute))
	if _, ok := g.OldestLease["gq-a"]; ok {
		t.Errorf("gq-a has no running task but an oldest lease %v", g.OldestLease["gq-a"])
	}
}

// testGaugesOpenDeadLetters: per queue, the oldest open dead letter's
// last_seen and the payload bytes of the open dead letters (spilled ones
// counted by their size), from the same query; closed dead letters and
// other tasks count for neither.
func (s *suite) testGaugesOpenDeadLetters(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 64})
	gr := b.store.(store.GaugeReader)
	big := `{"big":"` + strings.Repeat("x", 300) + `"}`
	b.dead(backstop.EnqueueParams{ID: "g-old", Queue: "gd-a", Kind: "k", Payload: []byte(`{"n":1}`)})
	b.clock.Advance(time.Hour)
	b.dead(backstop.EnqueueParams{ID: "g-big", Queue: "gd-a", Kind: "k", Payload: []byte(big)})
	b.dead(backstop.EnqueueParams{ID: "g-closed", Queue: "gd-b", Kind: "k", Payload: []byte(big)})
	b.dead(backstop.EnqueueParams{ID: "g-b", Queue: "gd-b", Kind: "k", Payload: []byte(`{"n":22}`)})
	if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "g-closed", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	b.enqueue(backstop.EnqueueParams{Queue: "gd-c", Kind: "k", Payload: []byte(big)}) // pending: not a dead letter
	if got := b.get("g-big"); !got.PayloadSpilled {
		t.Fatal("fixture: g-big's payload did not spill")
	}
	g, err := gr.Gauges(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "oldest open gd-a", g.OldestOpenDeadLetter["gd-a"], *b.get("g-old").LastSeen)
	eq(t, "oldest open gd-b", g.OldestOpenDeadLetter["gd-b"], *b.get("g-b").LastSeen)
	if !g.OldestOpenDeadLetter["gd-a"].Before(g.OldestOpenDeadLetter["gd-b"].Add(-59 * time.Minute)) {
		t.Fatalf("gd-a's oldest is not an hour before gd-b's: %v", g.OldestOpenDeadLetter)
	}
	eq(t, "queues with open dead letters", len(g.OldestOpenDeadLetter), 2)
	eq(t, "open bytes gd-a", g.OpenDeadLetterBytes["gd-a"], int64(len(`{"n":1}`)+len(big)))
	eq(t, "open bytes gd-b", g.OpenDeadLetterBytes["gd-b"], int64(len(`{"n":22}`)))
	eq(t, "queues with open bytes", len(g.OpenDeadLetterBytes), 2)

	// Replayed, it is no longer open: its queue leaves both gauges.
	b.replay(backstop.ReplayParams{ID: "g-b"})
	if g, err = gr.Gauges(b.ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.OldestOpenDeadLetter["gd-b"]; ok {
		t.Fatalf("gd-b has no open dead letter but an oldest %v", g.OldestOpenDeadLetter["gd-b"])
	}
	eq(t, "open bytes gd-b after the replay", g.OpenDeadLetterBytes["gd-b"], int64(0))
}

// BenchGauges measures the store gauges' one query (read every
// telemetry.GaugeInterval) over BACKSTOP_BENCH_TASKS tasks (default
// 100,000) in ten queues, a tenth of them open dead letters; it reports
// milliseconds per read.
func BenchGauges(b *testing.B, s store.Store) {
	ctx := context.Background()
	n := envInt("BACKSTOP_BENCH_TASKS", 100000)
	now := time.Now().UTC().Truncate(time.Microsecond)
	prefix := fmt.Sprintf("gauges-%d", now.UnixNano())
	for start := 0; start < n; start += 5000 {
		chunk := make([]*bt.Task, 0, 5000)
		for i := start; i < min(start+5000, n); i++ {
			chunk = append(chunk, &bt.Task{ID: fmt.Sprintf("%s-%09d", prefix, i), Queue: fmt.Sprintf("%s-q%d", prefix, i%10),
				Kind: "noop", State: bt.StatePending, MaxAttempts: 1, Payload: json.RawMessage(`{"n":1}`), RunAt: now,
				CreatedAt: now, UpdatedAt: now})
		}
		if _, err := s.Enqueue(ctx, chunk, store.EnqueueOpts{}); err != nil {
			b.Fatal(err)
		}
	}
	for q := range 10 {
		got, err := s.Claim(ctx, store.ClaimParams{Queue: fmt.Sprintf("%s-q%d", prefix, q), WorkerID: "bench", Max: n / 100,
			Now: now, Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		ss := make([]store.Settlement, len(got))
		for i, t := range got {
			ss[i] = store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, Outcome: bt.OutcomePermanentError, Error: "boom",
				FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
		}
		if _, err := s.Settle(ctx, ss); err != nil {
			b.Fatal(err)
		}
	}
	gr := s.(store.GaugeReader)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := gr.Gauges(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/read")
}
