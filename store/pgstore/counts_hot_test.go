package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

func exec(t *testing.T, s *pgstore.Store, sql string) {
	t.Helper()
	if _, err := s.Pool().Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func succeeded(tasks ...*bt.Task) []store.Settlement {
	ss := make([]store.Settlement, len(tasks))
	for i, tk := range tasks {
		ss[i] = store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Minute), State: bt.StateSucceeded}
	}
	return ss
}

// The claim (every form: plain, by kinds, from the cursor, the limited
// claim's by ids) and the success settle count their own batch: with the
// update trigger off they still move the counts exactly, a redriven task
// (its dead-letter status kept) and tasks of two queues in one settle
// included; with it on again nothing is counted twice, and a settle
// batch with a retry (the general settle) is the trigger's.
func TestHotStatementsCountThemselves(t *testing.T) {
	b := setup(t)
	s, ctx := b.store, t.Context()
	var tasks []*bt.Task
	for i := range 40 {
		tk := newTask([]string{"hx", "hy"}[i%2])
		tk.ID = fmt.Sprintf("hot-%03d", i)
		if i%4 == 2 {
			tk.Kind = "other"
		}
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	exec(t, s, `UPDATE backstop_tasks SET dlq_status = 'redriven' WHERE id IN ('hot-000', 'hot-001')`)
	if err := s.SetLimit(ctx, store.Limit{Name: "hot", Queue: "hy", Concurrency: 3, CreatedAt: t0}, bt.Event{}); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, "enqueued")

	exec(t, s, `ALTER TABLE backstop_tasks DISABLE TRIGGER backstop_task_counts_update`)
	x := claim(t, s, "hx", 3, t0.Add(time.Minute))
	x = append(x, claim(t, s, "hx", 2, t0.Add(time.Minute))...) // the cursor's pick
	kinds, err := s.Claim(ctx, store.ClaimParams{Queue: "hx", WorkerID: "w1", Max: 2, Now: t0.Add(time.Minute),
		Lease: time.Minute, Kinds: []string{"other"}})
	if err != nil || len(kinds) != 2 {
		t.Fatalf("claim by kind: %d %v", len(kinds), err)
	}
	y, err := s.Claim(ctx, store.ClaimParams{Queue: "hy", WorkerID: "w1", Max: 10, Now: t0.Add(time.Minute),
		Lease: time.Minute, Limited: true})
	if err != nil || len(y) != 3 {
		t.Fatalf("limited claim: %d %v", len(y), err)
	}
	if len(x) != 5 || x[0].ID != "hot-000" {
		t.Fatalf("claimed %d tasks of hx, the first %s: want 5, hot-000 (redriven) first", len(x), x[0].ID)
	}
	checkCounts(t, s, "claimed, trigger off")
	settle(t, s, succeeded(append(append(x[:3:3], kinds...), y[:2]...)...)...) // two queues in one batch
	checkCounts(t, s, "settled, trigger off")

	exec(t, s, `ALTER TABLE backstop_tasks ENABLE TRIGGER backstop_task_counts_update`)
	retry := store.Settlement{TaskID: x[3].ID, ExecutionID: x[3].ExecutionID, Outcome: bt.OutcomeTransientError, Error: "again",
		FinishedAt: t0.Add(time.Minute), State: bt.StatePending, RunAt: t0.Add(time.Minute)}
	settle(t, s, append(succeeded(x[4], y[2]), retry)...)
	checkCounts(t, s, "a success batch with a retry, trigger on")
	settle(t, s, succeeded(claim(t, s, "hx", 4, t0.Add(time.Minute))...)...)
	checkCounts(t, s, "claimed and settled, trigger on")
	if d, err := s.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile: %+v %v, want nothing to correct", d, err)
	}
}

// The mark a counted statement leaves is for that statement alone: a
// write after it in the same transaction (here a cancel, after a success
// settle) is counted by the trigger; a success settle that applies to no
// task (a lost lease) leaves no mark either.
func TestCountedMarkIsForItsStatement(t *testing.T) {
	b := setup(t)
	s, ctx := b.store, t.Context()
	var tasks []*bt.Task
	for i := range 6 {
		tk := newTask("m")
		tk.ID = fmt.Sprintf("mark-%d", i)
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	got := claim(t, s, "m", 2, t0.Add(time.Minute))
	for _, ss := range [][]store.Settlement{
		succeeded(got[0]),
		{{TaskID: got[1].ID, ExecutionID: "not-the-lease", Outcome: bt.OutcomeSucceeded, FinishedAt: t0.Add(time.Minute), State: bt.StateSucceeded}},
	} {
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := s.Txs().Settle(ctx, tx, ss); err != nil {
			t.Fatal(err)
		}
		var mark *string
		if err := tx.QueryRow(ctx, `SELECT current_setting('backstop.counted', true)`).Scan(&mark); err != nil {
			t.Fatal(err)
		}
		if mark != nil && *mark != "" {
			t.Fatalf("mark left after the settle: %q", *mark)
		}
		if _, err := tx.Exec(ctx, `UPDATE backstop_tasks SET state = 'canceled', finalized_at = now()
			WHERE id = (SELECT min(id) FROM backstop_tasks WHERE state = 'pending')`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, s, "a cancel after a settle in one transaction")
	}
}

// Migration 00060 on a database holding tasks claimed, settled and dead
// under the old trigger: the tasks claimed before it settle after it, the
// counts stay exact up, down and up again, and there is nothing to
// reconcile.
func TestCountedStatementsMigration(t *testing.T) {
	s := storeAt(t, 59)
	seedCounts(t, s, 300)
	running := claim(t, s, "z", 6, t0.Add(time.Minute))
	checkCounts(t, s, "at 59")
	if err := s.MigrateTo(t.Context(), 60); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, "migrated")
	settle(t, s, succeeded(running[:3]...)...)
	settle(t, s, succeeded(claim(t, s, "z", 4, t0.Add(time.Minute))...)...)
	checkCounts(t, s, "written after")
	if err := s.MigrateDownTo(t.Context(), 59); err != nil {
		t.Fatal(err)
	}
	settle(t, s, succeeded(running[3:]...)...)
	settle(t, s, succeeded(claim(t, s, "x", 4, t0.Add(time.Minute))...)...)
	checkCounts(t, s, "migrated down")
	if err := s.MigrateTo(t.Context(), 60); err != nil {
		t.Fatal(err)
	}
	settle(t, s, succeeded(claim(t, s, "y", 4, t0.Add(time.Minute))...)...)
	checkCounts(t, s, "applied again")
	// The reconcile is today's, which reads the later migrations' tables.
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d, err := s.ReconcileCounts(t.Context()); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile: %+v %v, want nothing to correct", d, err)
	}
}

// countedMarks finds where the store's Go code names the counted mark or
// builds a counted statement.
var countedMarks = regexp.MustCompile(`backstop\.counted|countedMove\([^)]*\)`)

// A statement that marks itself counted skips the trigger, so it must
// count every group change of every row it writes. This lists every
// place that names the mark or builds such a statement in the PostgreSQL
// store and the SQL it shares with SQLite: a new one fails here until it
// is looked at and added with what it counts.
func TestEveryCountedStatementIsListed(t *testing.T) {
	want := []string{
		"pgstore/counts.go backstop.counted",                                // countedMove: the mark
		"pgstore/copy.go backstop.counted",                                  // sqlCopiedEvents: every copied row's (queue, state), no dead-letter status or group (copiedCounts)
		"pgstore/counts.go countedMove(rows, from, to string)",              // its definition
		"pgstore/dlq.go backstop.counted",                                   // redriveCounted: each replayed row from (queue, dead, open) and its group to (queue, its state, '')
		"pgstore/queries.go backstop.counted",                               // countedInsert: a plan's inserted rows' (queue, state); an enqueue writes no dead-letter status or group
		`pgstore/queries.go countedMove("claimed", "pending", "running")`,   // formatClaim: WHERE state = 'pending', SET state = 'running'
		`pgstore/queries.go countedMove("settled", "running", "succeeded")`, // sqlSettleSucceeded: leaseHeld, SET state = 'succeeded'
	}
	var got []string
	for _, dir := range []string{".", "../internal/sqldialect"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			abs, err := filepath.Abs(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range countedMarks.FindAllString(string(src), -1) {
				got = append(got, filepath.Base(filepath.Dir(abs))+"/"+filepath.Base(f)+" "+m)
			}
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("counted statements:\n%s\nwant:\n%s\n(a statement that marks itself counted must count every group change it writes)",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
