package engine_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// stepReadCounter is a real store whose transactions count the step rows
// read by task id (StepsOfTasks).
type stepReadCounter struct {
	store.Store
	reads atomic.Int32
}

func (c *stepReadCounter) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return c.Store.InTx(ctx, func(tx store.Tx) error { return fn(countingTx{tx, c}) })
}

type countingTx struct {
	store.Tx
	c *stepReadCounter
}

func (t countingTx) StepsOfTasks(ctx context.Context, ids []string) ([]store.StepRecord, error) {
	t.c.reads.Add(1)
	return t.Tx.StepsOfTasks(ctx, ids)
}

// TestSettleBatchAdvancesRunsFromTheirLockedSteps: a settle batch that
// finishes a step of several runs advances them from the step rows it
// read with the runs' locks, without reading them again by task id (a
// round trip per batch on PostgreSQL), and the runs move on as before:
// the next steps are enqueued, the first ones recorded as succeeded.
func TestSettleBatchAdvancesRunsFromTheirLockedSteps(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		s, err := dburl.Open(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		cs := &stepReadCounter{Store: s}
		c, err := backstop.NewClient(cs, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		bld := workflow.New("pair").Queue("q")
		bld.Step("first", "noop")
		bld.Step("second", "noop").Needs("first")
		def, err := bld.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ApplyWorkflow(ctx, def); err != nil {
			t.Fatal(err)
		}
		const runs = 3
		ids := map[string]bool{}
		for range runs {
			r, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "pair"})
			if err != nil {
				t.Fatal(err)
			}
			ids[r.RunID] = true
		}
		ss := claimSucceeded(t, s, runs)
		oks, err := c.Engine().Settle(ctx, ss)
		if err != nil {
			t.Fatal(err)
		}
		for i, ok := range oks {
			if !ok {
				t.Fatalf("settlement of %s not applied", ss[i].TaskID)
			}
		}
		if n := cs.reads.Load(); n != 0 {
			t.Errorf("the settle batch read step rows by task id %d times; want 0 (they came with the runs' locks)", n)
		}
		next, err := s.Claim(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Max: 10, Now: time.Now(), Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(next) != runs {
			t.Fatalf("%d next steps enqueued; want %d", len(next), runs)
		}
		for _, tk := range next {
			run, step, _ := strings.Cut(tk.ID, ".")
			if !ids[run] || step != "second" {
				t.Errorf("enqueued %s; want <run>.second of a started run", tk.ID)
			}
		}
		for id := range ids {
			r, err := c.Run(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if r.Counts[bt.StateSucceeded] != 1 || r.Counts[bt.StateRunning] != 1 {
				t.Errorf("run %s: %v; want one succeeded step and one running", id, r.Counts)
			}
		}
	})
}
