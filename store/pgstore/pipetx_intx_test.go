package pgstore_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/workflow"
)

// stepRun is a store with a run of a two-step line (a, then b) started,
// a's task claimed: what a worker's settle of a step finds.
type stepRun struct {
	s     *pgstore.Store
	rt    *roundTrips
	run   store.RunRecord
	steps []store.StepRecord
	a     *bt.Task // claimed
}

func newStepRun(t *testing.T) stepRun {
	t.Helper()
	s, rt := tracedStore(t)
	r := startStepRun(t, s)
	r.rt = rt
	return r
}

// startStepRun starts the run of newStepRun in s and claims a's task.
func startStepRun(t testing.TB, s *pgstore.Store) stepRun {
	t.Helper()
	ctx := context.Background()
	c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b := workflow.New("line").Queue("wq")
	b.Step("a", "noop")
	b.Step("b", "noop").Needs("a")
	def, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ApplyWorkflow(ctx, def); err != nil {
		t.Fatal(err)
	}
	r, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "line"})
	if err != nil {
		t.Fatal(err)
	}
	run, steps, err := s.GetRun(ctx, r.RunID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, store.ClaimParams{Queue: "wq", WorkerID: "w1", Max: 1, Now: time.Now(), Lease: time.Hour})
	if err != nil || len(got) != 1 {
		t.Fatalf("claimed %d tasks (%v), want step a's", len(got), err)
	}
	return stepRun{s: s, run: *run, steps: steps, a: got[0]}
}

// advance is the plan of a's success: the run's update, a's step row
// succeeded and b's pending with its task, b's task.
func (r stepRun) advance(taskB *bt.Task) store.PlanWrite {
	now := time.Now().UTC().Truncate(time.Microsecond)
	run := r.run
	run.Seq, run.UpdatedAt = run.Seq+1, now
	var steps []store.StepRecord
	for _, st := range r.steps {
		if st.StepID == "a" {
			st.State, st.CompletedSeq, st.UpdatedAt = "succeeded", run.Seq, now
			steps = append(steps, st)
		}
	}
	steps = append(steps, store.StepRecord{RunID: run.RunID, StepID: "b", TaskID: taskB.ID, State: "pending", UpdatedAt: now})
	return store.PlanWrite{Updates: []store.RunRecord{run}, Steps: steps, Tasks: []*bt.Task{taskB}}
}

// unchanged fails t unless the run, its steps and a's task are as
// newStepRun left them, and no task taskB ("": none to look for) was
// written.
func (r stepRun) unchanged(t *testing.T, what string, taskB string) {
	t.Helper()
	run, steps, err := r.s.GetRun(t.Context(), r.run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Seq != r.run.Seq || !run.UpdatedAt.Equal(r.run.UpdatedAt) || len(steps) != len(r.steps) {
		t.Fatalf("%s: run written: seq %d (was %d), %d step rows (were %d)", what, run.Seq, r.run.Seq, len(steps), len(r.steps))
	}
	if a, err := r.s.Get(t.Context(), r.a.ID); err != nil || a.State != bt.StateRunning {
		t.Fatalf("%s: task a %v, %v; want still running", what, a, err)
	}
	if _, err := r.s.Get(t.Context(), taskB); taskB != "" && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("%s: task b: %v; want not written", what, err)
	}
	if n := r.s.Pool().Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%s: %d connections still held", what, n)
	}
}

// A workflow step's settle in the store's own transaction is three round
// trips: BEGIN with the runs' lock, the settle, the plan with COMMIT (it
// was five: begin, lock, settle, plan, commit).
func TestStepSettleThreeRoundTrips(t *testing.T) {
	r := newStepRun(t)
	ctx := t.Context()
	taskB := newTask("wq")
	taskB.ID = r.run.RunID + ".b"
	n0 := r.rt.trips()
	err := r.s.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.LockRuns(ctx, []string{r.run.RunID}); err != nil {
			return err
		}
		oks, err := tx.Settle(ctx, []store.Settlement{{TaskID: r.a.ID, ExecutionID: r.a.ExecutionID,
			Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded, FinishedAt: time.Now()}})
		if err != nil || !oks[0] {
			return errors.Join(err, errors.New("a not settled"))
		}
		_, err = tx.WritePlan(ctx, r.advance(taskB))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.rt.trips() - n0; n != 3 {
		t.Fatalf("a step's settle took %d round trips, want 3", n)
	}
	run, steps, err := r.s.GetRun(ctx, r.run.RunID)
	if err != nil || run.Seq != r.run.Seq+1 || len(steps) != 2 {
		t.Fatalf("run after the settle: %+v, %d steps, %v", run, len(steps), err)
	}
	if b, err := r.s.Get(ctx, taskB.ID); err != nil || b.State != bt.StatePending {
		t.Fatalf("task b: %v, %v; want pending", b, err)
	}
	if a, err := r.s.Get(ctx, r.a.ID); err != nil || a.State != bt.StateSucceeded {
		t.Fatalf("task a: %v, %v; want succeeded", a, err)
	}
}

// A plan held for the COMMIT that fails there (a task id that exists)
// fails the transaction: WritePlan returned, the commit reports the
// conflict, and nothing of the transaction is written — not the settle
// before it either. The connection goes back to the pool outside a
// transaction.
func TestHeldPlanFailingAtCommitWritesNothing(t *testing.T) {
	r := newStepRun(t)
	ctx := t.Context()
	taken := newTask("wq")
	taken.ID = r.a.ID // step a's task: the insert conflicts
	var planErr error
	n0 := r.rt.trips()
	err := r.s.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.LockRuns(ctx, []string{r.run.RunID}); err != nil {
			return err
		}
		if _, err := tx.Settle(ctx, []store.Settlement{{TaskID: r.a.ID, ExecutionID: r.a.ExecutionID,
			Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded, FinishedAt: time.Now()}}); err != nil {
			return err
		}
		_, planErr = tx.WritePlan(ctx, r.advance(taken))
		return planErr
	})
	if planErr != nil {
		t.Fatalf("WritePlan: %v; want it held for the commit", planErr)
	}
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("InTx: %v; want the plan's conflict", err)
	}
	if n := r.rt.trips() - n0; n != 4 { // begin+lock, settle, plan+commit, rollback
		t.Fatalf("%d round trips, want 4", n)
	}
	r.unchanged(t, "a held plan failing", "")

	// A statement after the held plan sends it first, and reports its
	// failure.
	err = r.s.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.LockRuns(ctx, []string{r.run.RunID}); err != nil {
			return err
		}
		if _, err := tx.WritePlan(ctx, r.advance(taken)); err != nil {
			return err
		}
		_, err := tx.TaskStates(ctx, []string{r.a.ID})
		return err
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a statement after a failing held plan: %v; want the plan's conflict", err)
	}
	r.unchanged(t, "a held plan failing before the next statement", "")
}

// A failure in the transaction's first round trip (BEGIN pipelined with
// the statements) rolls it back: nothing written, the connection back in
// the pool outside a transaction.
func TestPipelinedFirstStatementFailingWritesNothing(t *testing.T) {
	r := newStepRun(t)
	ctx := t.Context()
	taskB := newTask("wq")
	taskB.ID = r.run.RunID + ".b"
	w := r.advance(taskB)
	// b's step row names a's task: the step rows' insert fails, after
	// the run's update in the same pipeline (the run is not locked in
	// this transaction: the plan is sent at once, with BEGIN).
	w.Steps[len(w.Steps)-1].TaskID = r.a.ID
	n0 := r.rt.trips()
	var planErr error
	err := r.s.InTx(ctx, func(tx store.Tx) error {
		_, planErr = tx.WritePlan(ctx, w)
		return planErr
	})
	if !errors.Is(planErr, store.ErrConflict) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("WritePlan: %v, InTx: %v; want the step's conflict from both", planErr, err)
	}
	if n := r.rt.trips() - n0; n != 2 { // begin+plan, rollback
		t.Fatalf("%d round trips, want 2", n)
	}
	r.unchanged(t, "a first pipeline failing", taskB.ID)

	// On the pgx.Tx itself: the first statement fails with BEGIN.
	tx, err := r.s.Txs().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE backstop_runs SET seq = seq + 1 WHERE run_id = $1 AND 1 / (seq - seq) = 0`, r.run.RunID); err == nil {
		t.Fatal("a division by zero: no error")
	}
	if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("commit after a failed statement: %v; want ErrTxCommitRollback", err)
	}
	if err := tx.Rollback(context.WithoutCancel(ctx)); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("rollback after the commit: %v; want ErrTxClosed", err)
	}
	r.unchanged(t, "a failed first statement", taskB.ID)
}

// A transaction that sends nothing costs nothing, and the store's
// transaction's savepoints undo what they hold.
func TestOwnTxEmptyAndSavepoint(t *testing.T) {
	r := newStepRun(t)
	ctx := t.Context()
	n0 := r.rt.trips()
	if err := r.s.InTx(ctx, func(store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := r.rt.trips() - n0; n != 0 {
		t.Fatalf("an empty transaction took %d round trips, want 0", n)
	}
	tx, err := r.s.Txs().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Exec(ctx, `UPDATE backstop_runs SET seq = seq + 5 WHERE run_id = $1`, r.run.RunID); err != nil {
		t.Fatal(err)
	}
	if err := sp.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE backstop_runs SET error = 'kept' WHERE run_id = $1`, r.run.RunID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	run, _, err := r.s.GetRun(ctx, r.run.RunID)
	if err != nil || run.Seq != r.run.Seq || run.Error != "kept" {
		t.Fatalf("after a rolled back savepoint: seq %d error %q (%v); want seq %d, error kept", run.Seq, run.Error, err, r.run.Seq)
	}
}

// BenchmarkRunAdvanceTx: one run's advance in a transaction of the
// store's own, as a step's settle writes it without the settle: its run
// locked, then its update written (the run's seq, one step row). On
// Postgres four round trips before BEGIN and COMMIT went with the
// statements, two after; the time per transaction is what the two
// round trips cost on this box at its load:
//
//	go test -run '^$' -bench RunAdvanceTx -benchtime 2000x ./store/pgstore/
func BenchmarkRunAdvanceTx(b *testing.B) {
	s := benchStore(b)
	r := startStepRun(b, s)
	ctx := context.Background()
	run, step := r.run, r.steps[0]
	b.ResetTimer()
	for range b.N {
		run.Seq++
		run.UpdatedAt = time.Now().UTC().Truncate(time.Microsecond)
		step.UpdatedAt = run.UpdatedAt
		err := s.InTx(ctx, func(tx store.Tx) error {
			if _, err := tx.LockRuns(ctx, []string{run.RunID}); err != nil {
				return err
			}
			_, err := tx.WritePlan(ctx, store.PlanWrite{Updates: []store.RunRecord{run}, Steps: []store.StepRecord{step}})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/tx")
}

// A batch written by COPY in InTx is the raw COPY stream in the store's
// own transaction, and its COMMIT stays with the transaction's: what
// follows it in fn is in the same transaction, and fn's error rolls the
// copied rows back with the rest.
func TestOwnTxCopiedBatch(t *testing.T) {
	s, rt := tracedStore(t)
	ctx := t.Context()
	errUndo := errors.New("undo")
	for _, fail := range []bool{true, false} {
		c0 := rt.copies.Load()
		prefix := map[bool]string{true: "undone", false: "kept"}[fail]
		err := s.InTx(ctx, func(tx store.Tx) error {
			if _, err := tx.Enqueue(ctx, plainTasks(prefix+"-copied", 100), store.EnqueueOpts{}); err != nil {
				return err
			}
			if _, err := tx.Enqueue(ctx, plainTasks(prefix+"-after", 2), store.EnqueueOpts{}); err != nil {
				return err
			}
			if fail {
				return errUndo
			}
			return nil
		})
		if fail && !errors.Is(err, errUndo) || !fail && err != nil {
			t.Fatalf("InTx (fail %v): %v", fail, err)
		}
		if c := rt.copies.Load() - c0; c != 1 {
			t.Fatalf("InTx (fail %v) sent %d COPYs, want 1", fail, c)
		}
		if n := s.Pool().Stat().AcquiredConns(); n != 0 {
			t.Fatalf("InTx (fail %v): %d connections still held", fail, n)
		}
	}
	var undone, kept int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE id LIKE 'undone-%'), count(*) FILTER (WHERE id LIKE 'kept-%') FROM backstop_tasks`).Scan(&undone, &kept); err != nil {
		t.Fatal(err)
	}
	if undone != 0 || kept != 102 {
		t.Fatalf("%d tasks of the rolled-back InTx and %d of the committed one, want 0 and 102", undone, kept)
	}
}
