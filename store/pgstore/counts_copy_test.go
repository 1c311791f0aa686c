package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// plainBatch is n tasks without keys over two queues, every third
// scheduled: a batch written by COPY.
func plainBatch(prefix string, n int) []*bt.Task {
	tasks := make([]*bt.Task, n)
	for i := range tasks {
		tk := newTask([]string{"ca", "cb"}[i%2])
		tk.ID = fmt.Sprintf("%s-%03d", prefix, i)
		if i%3 == 2 {
			tk.State, tk.RunAt = bt.StateScheduled, t0.Add(time.Hour)
		}
		tasks[i] = tk
	}
	return tasks
}

// countedMark is the transaction's count mark ("" when none).
func countedMark(t *testing.T, tx pgx.Tx) string {
	t.Helper()
	var mark *string
	if err := tx.QueryRow(t.Context(), `SELECT current_setting('backstop.counted', true)`).Scan(&mark); err != nil {
		t.Fatal(err)
	}
	if mark == nil {
		return ""
	}
	return *mark
}

// A batch enqueue written by COPY counts its own batch, from the statement
// that writes its event: with the insert trigger off the counts still
// move exactly (Enqueue, EnqueueTx, Txs.Enqueue); with it on nothing is
// counted twice. The mark is for the COPY alone: the next statement of
// the transaction is counted by the trigger, and a COPY that met a taken
// id takes its deltas and its mark with its savepoint.
func TestCopiedBatchCountsItself(t *testing.T) {
	b := setup(t)
	s, ctx := b.store, t.Context()
	seedCounts(t, s, 90) // dead letters with groups among them
	checkCounts(t, s, "seeded")

	exec(t, s, `ALTER TABLE backstop_tasks DISABLE TRIGGER backstop_task_counts_insert`)
	enqueue(t, s, store.EnqueueOpts{}, plainBatch("off", 30)...)
	checkCounts(t, s, "copied, trigger off")
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueTx(ctx, tx, plainBatch("offtx", 20), store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, "copied in the caller's transaction, trigger off")
	exec(t, s, `ALTER TABLE backstop_tasks ENABLE TRIGGER backstop_task_counts_insert`)

	enqueue(t, s, store.EnqueueOpts{}, plainBatch("on", 40)...)
	checkCounts(t, s, "copied, trigger on")

	// The next statement: a batch by INSERT (below the COPY's size) after
	// a copied one, in one transaction.
	tx, err = s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := s.Txs().Enqueue(ctx, tx, plainBatch("next", 20), store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	if m := countedMark(t, tx); m != "" {
		t.Fatalf("mark left after the copied batch: %q", m)
	}
	if _, err := s.Txs().Enqueue(ctx, tx, plainBatch("next-insert", 3), store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	// A copied batch with a taken id: the COPY fails, its savepoint is
	// rolled back, the INSERTs report the id.
	taken := plainBatch("taken", 20)
	taken[7].ID = "on-005"
	if _, err := s.Txs().Enqueue(ctx, tx, taken, store.EnqueueOpts{}); err == nil {
		t.Fatal("enqueue of a taken id: no error")
	}
	if m := countedMark(t, tx); m != "" {
		t.Fatalf("mark left after a COPY that failed: %q", m)
	}
	if _, err := s.Txs().Enqueue(ctx, tx, plainBatch("after-taken", 4), store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, "inserts after copied batches in one transaction")

	var groupDeltas int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM backstop_dlq_group_count_deltas WHERE n > 0 AND queue IN ('ca', 'cb')`).Scan(&groupDeltas); err != nil || groupDeltas != 0 {
		t.Fatalf("dead letters' groups of the copied queues: %d (%v), want none", groupDeltas, err)
	}
	if d, err := s.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile: %+v %v, want nothing to correct", d, err)
	}
}

// Migration 00063 on a database holding tasks and dead letters: copied
// batches are counted exactly at 59 (the trigger counts them), at 62 (the
// statement counts them, the groups' trigger reads the COPY), at 63, down
// to 62 and up again, with nothing to reconcile.
func TestCopyCountsItselfMigration(t *testing.T) {
	s := storeAt(t, 59)
	seedCounts(t, s, 300)
	checkCounts(t, s, "at 59")
	step := func(what string, to int64, down bool) {
		t.Helper()
		var err error
		if down {
			err = s.MigrateDownTo(t.Context(), to)
		} else {
			err = s.MigrateTo(t.Context(), to)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		enqueue(t, s, store.EnqueueOpts{}, plainBatch(what, 25)...)
		checkCounts(t, s, what)
	}
	enqueue(t, s, store.EnqueueOpts{}, plainBatch("at59", 25)...)
	checkCounts(t, s, "copied at 59")
	step("at62", 62, false)
	step("at63", 63, false)
	seedDeadLetter(t, s)
	step("down62", 62, true)
	step("up63", 63, false)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d, err := s.ReconcileCounts(t.Context()); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile: %+v %v, want nothing to correct", d, err)
	}
}

// seedDeadLetter kills one running task with an error: a dead letter with
// a group, written after the migration.
func seedDeadLetter(t *testing.T, s *pgstore.Store) {
	t.Helper()
	got := claim(t, s, "z", 1, t0.Add(time.Minute))
	settle(t, s, store.Settlement{TaskID: got[0].ID, ExecutionID: got[0].ExecutionID, Outcome: bt.OutcomePermanentError,
		Error: "copy-counts", FinishedAt: t0.Add(time.Minute), State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
}
