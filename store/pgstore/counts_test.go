package pgstore_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
	"github.com/backstophq/backstop/store/pgstore"
)

// exactCounts is a count of every task by queue, state and dead-letter
// status: one grouped scan (sqldialect.SQLCountByQueue), what the kept
// counts must equal.
func exactCounts(t *testing.T, s *pgstore.Store) []store.QueueCounts {
	t.Helper()
	rows, err := s.Pool().Query(t.Context(), sqldialect.SQLCountByQueue)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := sqldialect.ScanQueueCounts("exact", rows)
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

func checkCounts(t *testing.T, s *pgstore.Store, what string) []store.QueueCounts {
	t.Helper()
	qs, err := s.CountByQueue(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if exact := exactCounts(t, s); !reflect.DeepEqual(qs, exact) {
		t.Fatalf("%s: counts %+v, want %+v", what, qs, exact)
	}
	return qs
}

// seedCounts writes tasks of every common state over three queues:
// pending (three priorities), scheduled, running, succeeded, dead.
func seedCounts(t *testing.T, s store.Store, n int) {
	t.Helper()
	var tasks []*bt.Task
	for i := range n {
		tk := newTask([]string{"x", "y", "z"}[i%3])
		tk.ID = fmt.Sprintf("cnt-%05d", i)
		tk.Priority = i % 3
		tk.RunAt = t0.Add(time.Duration(i%7) * time.Second)
		if i%10 == 9 {
			tk.State, tk.RunAt = bt.StateScheduled, t0.Add(time.Hour)
		}
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	for _, q := range []string{"x", "y"} {
		var ss []store.Settlement
		for i, tk := range claim(t, s, q, n/6, t0.Add(time.Minute)) {
			switch i % 3 {
			case 0:
				ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
					FinishedAt: t0.Add(time.Minute), State: bt.StateSucceeded})
			case 1:
				ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
					Error: "boom", FinishedAt: t0.Add(time.Minute), State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
			}
		}
		settle(t, s, ss...)
	}
}

// The counts are exact for every state, the finished ones included, past
// the number of finished tasks the gauges count (which capped them when
// they were counted from the indexes), and the oldest pending run_at is
// each queue's earliest over its priorities.
func TestCountByQueueExactPastTheCap(t *testing.T) {
	b := setup(t)
	seedCounts(t, b.store, 60)
	b.store.SetFinishedCounted(1)
	defer b.store.SetFinishedCounted(pgstore.FinishedCounted)
	qs := checkCounts(t, b.store, "past the cap")
	if len(qs) != 3 || qs[0].Counts[bt.StateSucceeded] == 0 || qs[1].Counts[bt.StateSucceeded] == 0 {
		t.Fatalf("counts %+v: want succeeded tasks in x and y", qs)
	}
}

// CountByQueue reads the kept counts and, for the oldest pending run_at,
// probes the claim index: its plan reads no other part of the task table,
// however many tasks there are; the answer is the grouped scan's, before
// and after a fold; migration 00059 rolls back and applies again.
func TestCountByQueuePlan(t *testing.T) {
	b := setup(t)
	seedCounts(t, b.store, 1000)
	if _, err := b.store.FoldCounts(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Pool().Exec(t.Context(), "VACUUM ANALYZE backstop_tasks"); err != nil {
		t.Fatal(err)
	}
	plan, err := b.store.ExplainCounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(plan, "\n") {
		if strings.Contains(line, " on backstop_tasks ") && !strings.Contains(line, "using backstop_tasks_claim") {
			t.Fatalf("reads the task table past the claim index: %s\n%s", line, plan)
		}
	}
	if !strings.Contains(plan, "backstop_task_counts") || !strings.Contains(plan, "backstop_tasks_claim") {
		t.Fatalf("plan:\n%s", plan)
	}
	qs := checkCounts(t, b.store, "folded")
	if err := b.store.MigrateDownTo(t.Context(), 58); err != nil {
		t.Fatal(err)
	}
	if err := b.store.MigrateTo(t.Context(), 59); err != nil {
		t.Fatal(err)
	}
	if again := checkCounts(t, b.store, "migrated again"); !reflect.DeepEqual(again, qs) {
		t.Fatalf("after 00059 again: %+v, want %+v", again, qs)
	}
}

// Migration 00059 on a database holding tasks: the kept counts start as
// their count, and the writes after it move them.
func TestKeptCountsMigration(t *testing.T) {
	s := storeAt(t, 58)
	seedCounts(t, s, 300)
	if err := s.MigrateTo(t.Context(), 59); err != nil {
		t.Fatal(err)
	}
	var deltas int
	if err := s.Pool().QueryRow(t.Context(), `SELECT count(*) FROM backstop_task_count_deltas`).Scan(&deltas); err != nil || deltas != 0 {
		t.Fatalf("deltas after the migration: %d %v", deltas, err)
	}
	checkCounts(t, s, "migrated")
	got := claim(t, s, "z", 5, t0.Add(time.Minute))
	settle(t, s, store.Settlement{TaskID: got[0].ID, ExecutionID: got[0].ExecutionID, Outcome: bt.OutcomeSucceeded,
		FinishedAt: t0.Add(time.Minute), State: bt.StateSucceeded})
	checkCounts(t, s, "written after")
}

// A write past the triggers (here, with triggers off for the session)
// leaves the kept counts wrong until a reconciliation, which appends the
// difference and says how wrong they were; a second one finds nothing.
func TestKeptCountsReconcile(t *testing.T) {
	b := setup(t)
	seedCounts(t, b.store, 30)
	ctx := t.Context()
	tx, err := b.store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SET LOCAL session_replication_role = replica`,
		`UPDATE backstop_tasks SET state = 'canceled', finalized_at = now() WHERE id IN ('cnt-00002', 'cnt-00005')`, // z, pending
		`INSERT INTO backstop_task_count_deltas VALUES ('ghost', 'pending', '', 4)`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if qs, err := b.store.CountByQueue(ctx); err != nil || reflect.DeepEqual(qs, exactCounts(t, b.store)) {
		t.Fatalf("counts right before the reconciliation: %+v %v", qs, err)
	}
	d, err := b.store.ReconcileCounts(ctx)
	if err != nil || d != (store.CountDrift{Groups: 3, Tasks: 8}) {
		t.Fatalf("reconcile: %+v %v, want 3 groups (z pending, z canceled, ghost) and 2+2+4 tasks", d, err)
	}
	checkCounts(t, b.store, "reconciled")
	if _, err := b.store.FoldCounts(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, b.store, "folded")
	if d, err := b.store.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("second reconcile: %+v %v", d, err)
	}
}

// Claims and settles on several connections at once, folds running
// beside them: the counts stay exact and a reconciliation finds nothing.
func TestKeptCountsConcurrentWrites(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	var tasks []*bt.Task
	for i := range 400 {
		tk := newTask(fmt.Sprintf("q%d", i%4))
		tk.ID = fmt.Sprintf("cw-%04d", i)
		tasks = append(tasks, tk)
	}
	enqueue(t, b.store, store.EnqueueOpts{}, tasks...)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := fmt.Sprintf("q%d", w)
			for {
				got, err := b.store.Claim(ctx, store.ClaimParams{Queue: q, WorkerID: q, Max: 7, Now: t0, Lease: time.Minute})
				if err != nil || len(got) == 0 {
					errs <- err
					return
				}
				ss := make([]store.Settlement, len(got))
				for i, tk := range got {
					ss[i] = store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded, FinishedAt: t0, State: bt.StateSucceeded}
					if i%3 == 0 {
						ss[i] = store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
							Error: "x", FinishedAt: t0, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
					}
				}
				if _, err := b.store.Settle(ctx, ss); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	folds := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				folds <- nil
				return
			default:
			}
			if _, err := b.store.FoldCounts(context.WithoutCancel(ctx)); err != nil {
				folds <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	if err := <-folds; err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	qs := checkCounts(t, b.store, "after the writers")
	if len(qs) != 4 || qs[0].Counts[bt.StatePending] != 0 || qs[0].Counts[bt.StateSucceeded] == 0 {
		t.Fatalf("counts %+v: want every task finished", qs)
	}
	if d, err := b.store.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile: %+v %v", d, err)
	}
}

// With btree_gin, migration 00059 makes the dead letters' trigram index
// hold their queue too: a filter of one queue's dead letters by an error
// text is one lookup of both in it (the queue in the index condition),
// instead of the queue's dead letters or the text's read and checked row
// by row; the answers are strpos's, with or without a queue.
func TestDeadErrorIndexHoldsTheQueue(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storeAt(t, 58)
	var tasks []*bt.Task
	for i := range 120 {
		tk := newTask(fmt.Sprintf("q%d", i%3))
		tk.ID = fmt.Sprintf("de-%04d", i)
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	for _, q := range []string{"q0", "q1", "q2"} {
		var ss []store.Settlement
		for i, tk := range claim(t, s, q, 40, t0) {
			ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
				Error: []string{"timeout after 30s", "card declined", "50% off"}[i%3] + " in " + q, FinishedAt: t0,
				State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
		}
		settle(t, s, ss...)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var available, cols int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_available_extensions WHERE name IN ('pg_trgm', 'btree_gin')`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT COALESCE((SELECT indnatts FROM pg_index WHERE indexrelid = to_regclass('backstop_tasks_dead_error')), 0)`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if available < 2 {
		t.Skip("pg_trgm or btree_gin is not available on this server")
	}
	if cols != 2 {
		t.Fatalf("backstop_tasks_dead_error has %d columns, want 2 (queue, last_error)", cols)
	}
	for _, f := range []store.ListFilter{
		{Queue: "q1", ErrorContains: "timeout"},
		{Queue: "q2", ErrorContains: "0% o"},
		{ErrorContains: "declined in q0"},
	} {
		f.States, f.Limit, f.WithoutPayload = []bt.State{bt.StateDead}, 1000, true
		rows, err := s.Pool().Query(ctx, `SELECT id FROM backstop_tasks WHERE state = 'dead' AND ($1 = '' OR queue = $1)
			AND strpos(last_error, $2) > 0 ORDER BY id`, f.Queue, f.ErrorContains)
		if err != nil {
			t.Fatal(err)
		}
		want, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		page, err := s.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(page); len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v: %v, want %v", f, got, want)
		}
		if f.Queue == "" {
			continue
		}
		p, err := s.ExplainListWithout(ctx, f, []string{"backstop_tasks_dead", "backstop_tasks_dlq_open", "backstop_tasks_dlq_groups",
			"backstop_tasks_counts", "backstop_tasks_dlq_ungrouped", "backstop_tasks_payload"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p, "Bitmap Index Scan on backstop_tasks_dead_error") || !strings.Contains(p, "Index Cond: ((queue = ") {
			t.Fatalf("%+v: the queue is not looked up in the error index:\n%s", f, p)
		}
	}
	if err := s.MigrateDownTo(ctx, 58); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT indnatts FROM pg_index WHERE indexrelid = to_regclass('backstop_tasks_dead_error')`).Scan(&cols); err != nil || cols != 1 {
		t.Fatalf("rolled back: %d columns, %v", cols, err)
	}
}
