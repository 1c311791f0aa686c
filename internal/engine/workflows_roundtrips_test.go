package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/workflow"
)

// roundTrips counts what a pool sends to the server: each statement, and
// each batch (a pipeline) once (n); and the statements, each of a batch
// too (stmts).
type roundTrips struct{ n, stmts atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	r.stmts.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	r.stmts.Add(1)
}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestWorkflowRoundTripsPostgres: on PostgreSQL a run's start writes its
// run row, step rows, first tasks and events in one round trip (begin,
// the writes, commit, and the tasks' NOTIFY after it; the workflow's
// latest version is the one the client registered or last read: the
// write fails if a later one was registered since — its transaction is
// then rolled back, one more round trip — and the start plans again),
// and a settle batch that finishes steps is two round trips (begin with
// the runs locked with their steps and the settle, then the writes —
// runs' updates, step rows, next tasks, events — with commit); and the
// runs still move on.
func TestWorkflowRoundTripsPostgres(t *testing.T) {
	ctx := context.Background()
	c, rt := countedLinearClient(t)
	s := c.Store().(*pgstore.Store)
	const runs = 3
	for i := range runs {
		before := rt.n.Load()
		if _, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "linear"}); err != nil {
			t.Fatal(err)
		}
		// The first start also prepares the statements (cached after).
		n := rt.n.Load() - before
		t.Logf("start %d: %d round trips", i, n)
		if i > 0 && n > 1 {
			t.Errorf("a run's start took %d round trips; want 1 (the writes: the latest version is the one this client registered)", n)
		}
	}
	// Another process registers a version: the next start finds its own
	// stale (its write fails and is rolled back), reads the latest and
	// writes again; the start after it is one round trip again.
	other, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	v2, _, err := other.ApplyWorkflow(ctx, linearDef(t, "linear", 4))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{4, 1} {
		before := rt.n.Load()
		r, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "linear"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Version != v2.Version || r.PlanHash != v2.PlanHash {
			t.Fatalf("a start after another client registered version %d: version %d (%s)", v2.Version, r.Version, r.PlanHash)
		}
		if n := rt.n.Load() - before; n != want {
			t.Errorf("start %d after another client's registration: %d round trips, want %d", i, n, want)
		}
		if _, err := s.Pool().Exec(ctx, "DELETE FROM backstop_tasks WHERE queue = 'q' AND attributes->>'run_id' = $1", r.RunID); err != nil {
			t.Fatal(err)
		}
	}
	ss := claimSucceeded(t, s, runs)
	before := rt.n.Load()
	if _, err := c.Engine().Settle(ctx, ss); err != nil {
		t.Fatal(err)
	}
	n := rt.n.Load() - before
	t.Logf("settle batch of %d steps: %d round trips", runs, n)
	if n > 2 {
		t.Errorf("a settle batch finishing %d steps took %d round trips; want at most 2 (begin with the runs' lock and the settle, the writes with commit)", runs, n)
	}
	next, err := s.Claim(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Max: 10, Now: time.Now(), Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(next) != runs {
		t.Fatalf("%d next steps enqueued; want %d", len(next), runs)
	}
}

// TestWorkflowWideSettleRoundTripsPostgres: a settle batch finishing
// the first steps of 120 runs (240 step rows, 240 events: more than the
// 64 a pipeline took before) is two round trips on PostgreSQL, as a
// narrow one: begin with the runs' locks and the settle, then the plan
// with the commit; its step rows and events are one statement each (they
// were a statement per 8 rows: 60 for these); and every run moves on.
func TestWorkflowWideSettleRoundTripsPostgres(t *testing.T) {
	ctx := context.Background()
	c, rt := countedLinearClient(t)
	s := c.Store().(*pgstore.Store)
	const runs = 120
	ps := make([]backstop.RunWorkflowParams, runs)
	for j := range ps {
		ps[j] = backstop.RunWorkflowParams{Workflow: "linear"}
	}
	if _, err := c.RunWorkflows(ctx, ps); err != nil {
		t.Fatal(err)
	}
	ss := claimSucceeded(t, s, runs)
	before, stmts := rt.n.Load(), rt.stmts.Load()
	oks, err := c.Engine().Settle(ctx, ss)
	if err != nil {
		t.Fatal(err)
	}
	n, m := rt.n.Load()-before, rt.stmts.Load()-stmts
	t.Logf("settle batch of %d steps: %d round trips, %d statements", runs, n, m)
	if n > 2 {
		t.Errorf("a settle batch finishing %d steps took %d round trips; want at most 2 (begin with the runs' lock and the settle, the writes with commit)", runs, n)
	}
	// begin, the runs' lock, their steps, the settle; the run updates, the
	// step rows, the tasks, the events (each one statement of arrays),
	// commit, the wake-up.
	if m > 10 {
		t.Errorf("a settle batch finishing %d steps sent %d statements; want at most 10 (the step rows and the events one statement each)", runs, m)
	}
	for i, ok := range oks {
		if !ok {
			t.Fatalf("settlement %d (%s) not applied", i, ss[i].TaskID)
		}
	}
	next, err := s.Claim(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Max: 2 * runs, Now: time.Now(), Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(next) != runs {
		t.Fatalf("%d next steps enqueued; want %d", len(next), runs)
	}
	for _, tk := range next {
		if !strings.HasSuffix(tk.ID, ".s1") {
			t.Errorf("enqueued %s; want each run's step s1", tk.ID)
		}
	}
}

// linearDef is a workflow of n steps in a line, on queue q.
func linearDef(t *testing.T, name string, n int) *workflow.Definition {
	t.Helper()
	b := workflow.New(name).Queue("q")
	for i := range n {
		st := b.Step(fmt.Sprintf("s%d", i), "noop")
		if i > 0 {
			st.Needs(fmt.Sprintf("s%d", i-1))
		}
	}
	def, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return def
}

// countedLinearClient is a client on a migrated Postgres store whose
// pool counts its round trips (rt), with the 5-step workflow "linear"
// registered.
func countedLinearClient(t *testing.T) (*backstop.Client, *roundTrips) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := pgstore.New(pool)
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ApplyWorkflow(ctx, linearDef(t, "linear", 5)); err != nil {
		t.Fatal(err)
	}
	return c, rt
}

// claimSucceeded claims n tasks of queue q (all it holds, or the test
// fails) and answers a success settlement for each.
func claimSucceeded(t *testing.T, s store.Store, n int) []store.Settlement {
	t.Helper()
	now := time.Now()
	got, err := s.Claim(context.Background(), store.ClaimParams{Queue: "q", WorkerID: "w", Max: n, Now: now, Lease: time.Minute})
	if err != nil || len(got) != n {
		t.Fatalf("claim: %d tasks, %v", len(got), err)
	}
	ss := make([]store.Settlement, len(got))
	for i, tk := range got {
		ss[i] = store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: now, State: bt.StateSucceeded}
	}
	return ss
}
