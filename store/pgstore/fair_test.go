package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// TestFairOneValueTakesNoLock: once a fair claim found one value waiting,
// the queue's fair claims go the plain way (store.FairOneValueFor), and
// renew that without the lock while one value still waits: they neither
// rank the queue nor wait for the fairness lock, which another
// transaction holds here. With two values waiting they do.
func TestFairOneValueTakesNoLock(t *testing.T) {
	b := setup(t)
	s, ctx := b.store, t.Context()
	if err := s.SetFair(ctx, store.FairQueue{Queue: "fq", By: "tenant", CreatedAt: t0}, bt.Event{}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		task := newTask("fq")
		task.Attributes = map[string]string{"tenant": "a"}
		enqueue(t, s, store.EnqueueOpts{}, task)
	}
	fairClaim := func(ctx context.Context, now time.Time) ([]*bt.Task, error) {
		return s.Claim(ctx, store.ClaimParams{Queue: "fq", WorkerID: "w", Max: 1, Now: now, Lease: time.Minute, Fair: true})
	}
	if got, err := fairClaim(ctx, t0); err != nil || len(got) != 1 {
		t.Fatalf("first fair claim: %v %v", got, err)
	}
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM backstop_fair_queues WHERE queue = 'fq' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{store.FairOneValueFor / 2, store.FairOneValueFor} {
		wait, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := fairClaim(wait, t0.Add(at))
		cancel()
		if err != nil || len(got) != 1 {
			t.Fatalf("one-value fair claim at +%v beside the fairness lock: %v %v, want a task at once", at, got, err)
		}
	}
	// A second value waits: past the mark (renewed at +FairOneValueFor),
	// the claim ranks the values under the lock, so it waits.
	task := newTask("fq")
	task.Attributes = map[string]string{"tenant": "b"}
	enqueue(t, s, store.EnqueueOpts{}, task)
	wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := fairClaim(wait, t0.Add(2*store.FairOneValueFor)); err == nil {
		t.Fatal("a fair claim with two values waiting did not wait for the fairness lock")
	}
}
