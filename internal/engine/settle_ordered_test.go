package engine_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/testclock"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// TestSettleOrderedOnlyForOrderedQueues: in a client with an ordered
// queue, a batch that ends a task of that queue is settled with its key's
// admission (store.Ordering.SettleOrdered: the key's next task is pending
// at once), while a plain queue's batch is the store's one-statement
// Settle, as in a client without ordering. The store is a real SQLite file
// whose Settle is recorded (testdb.SettleRecorder; SettleOrdered is the
// driver's own, unrecorded).
func TestSettleOrderedOnlyForOrderedQueues(t *testing.T) {
	ctx := context.Background()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rec := testdb.RecordSettlements(s)
	c, err := backstop.NewClient(rec, &backstop.Config{Clock: testclock.At(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.DiscardHandler),
		Queues: map[string]backstop.QueueConfig{"oq": {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	e := c.Engine()
	var second string
	for seq := int64(1); seq <= 2; seq++ {
		r, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "oq", Kind: "k", OrderingKey: "key", Sequence: seq})
		if err != nil {
			t.Fatal(err)
		}
		second = r.Task.ID
	}
	if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "q", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	succeed := func(queue string) {
		t.Helper()
		ts, _, err := e.Claim(ctx, engine.ClaimParams{Queue: queue, WorkerID: "w", Max: 10, Lease: time.Minute})
		if err != nil || len(ts) != 1 {
			t.Fatalf("claim %s: %d tasks, %v", queue, len(ts), err)
		}
		oks, err := e.Settle(ctx, []store.Settlement{e.Decide(engine.Report{Task: ts[0]})})
		if err != nil || !oks[0] {
			t.Fatalf("settle %s: %v %v", queue, oks, err)
		}
	}
	succeed("q")
	if n := len(rec.Batches()); n != 1 {
		t.Fatalf("plain queue: %d batches reached the store's Settle, want 1", n)
	}
	succeed("oq")
	if n := len(rec.Batches()); n != 1 {
		t.Fatalf("ordered queue: %d batches reached the store's Settle, want still 1 (settled with its key's admission)", n)
	}
	task, err := c.Get(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if task.State != bt.StatePending {
		t.Fatalf("the key's next task is %s after the settle, want pending", task.State)
	}
}
