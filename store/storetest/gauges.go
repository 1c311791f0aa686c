package storetest

import (
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
