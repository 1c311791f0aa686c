package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// Txs is the store's composable writes inside a *sql.Tx: store.TxStore
// for *sql.Tx. The transaction is one Begin returned or one the caller
// began on DB() (the writer; the caller then commits). Each operation runs
// the statements of the Store method of the same name, so it costs no
// more; after one failed the transaction must roll back (it may hold part
// of the failed operation).
//
// Workers of this process are woken for the queues an operation made
// claimable as soon as it returns, before the commit: their claims go
// through the same single writer connection, so they wait for the commit
// (or the rollback, after which they find nothing new) as EnqueueTx's do.
type Txs struct{ s *Store }

var _ store.TxStore[*sql.Tx] = Txs{}

// Txs returns the store's writes inside a *sql.Tx.
func (s *Store) Txs() Txs { return Txs{s} }

// InTx implements store.Store (store.RunInTx over Txs). The transaction
// holds the process's one writer connection until it ends.
func (s *Store) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return store.RunInTx(ctx, Txs{s}, fn)
}

// Begin starts a writer transaction (BEGIN IMMEDIATE).
func (t Txs) Begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := t.s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: begin: %w", err)
	}
	return tx, nil
}

// Commit commits tx.
func (Txs) Commit(_ context.Context, tx *sql.Tx) error {
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

// Rollback rolls tx back.
func (Txs) Rollback(_ context.Context, tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil {
		return fmt.Errorf("sqlite: rollback: %w", err)
	}
	return nil
}

// Settle is Store.Settle inside tx.
func (t Txs) Settle(ctx context.Context, tx *sql.Tx, settlements []store.Settlement) ([]bool, error) {
	settlements = store.CleanSettlements(settlements) // store/text.go, as Settle
	if len(settlements) == 0 {
		return nil, nil
	}
	applied, woke, err := t.s.settle(ctx, tx, settlements)
	if err != nil {
		return nil, err
	}
	t.s.hub.notify(woke)
	return applied, nil
}

// Enqueue is Store.Enqueue inside tx.
func (t Txs) Enqueue(ctx context.Context, tx *sql.Tx, tasks []*bt.Task, opts store.EnqueueOpts) ([]store.EnqueueResult, error) {
	res, woke, err := enqueue(ctx, tx, tasks, opts)
	if err != nil {
		return nil, err
	}
	t.s.hub.notify(woke)
	return res, nil
}

// AppendEvents writes events inside tx (events_write.go), each indexed
// under its subject.
func (Txs) AppendEvents(ctx context.Context, tx *sql.Tx, events []bt.Event) error {
	if err := store.CheckEvents(events); err != nil {
		return err
	}
	return insertEvents(ctx, tx, events)
}

// InsertRun is store.WorkflowTx's InsertRun inside tx.
func (Txs) InsertRun(ctx context.Context, tx *sql.Tx, r store.RunRecord) error {
	return sqldialect.WorkflowInsertRun(ctx, dialect, runner{q: tx}, r)
}

// LockRun is store.WorkflowTx's LockRun inside tx. The writer's
// transaction (BEGIN IMMEDIATE) already holds the database: two
// transactions advancing a run take turns.
func (Txs) LockRun(ctx context.Context, tx *sql.Tx, runID string) (*store.RunRecord, []store.StepRecord, error) {
	return sqldialect.WorkflowLockRun(ctx, dialect, runner{q: tx}, runID)
}

// LockRuns is store.WorkflowTx's LockRuns inside tx (the writer's
// transaction holds the database).
func (Txs) LockRuns(ctx context.Context, tx *sql.Tx, runIDs []string) ([]store.LockedRun, error) {
	return sqldialect.WorkflowLockRuns(ctx, dialect, runner{q: tx}, runIDs)
}

// LockRunsSettle is store.Tx's LockRunsSettle inside tx: LockRuns, then
// Settle (calls in this process, no round trips to save).
func (t Txs) LockRunsSettle(ctx context.Context, tx *sql.Tx, runIDs []string, ss []store.Settlement) ([]store.LockedRun, []bool, error) {
	locked, err := t.LockRuns(ctx, tx, runIDs)
	if err != nil {
		return nil, nil, err
	}
	oks, err := t.Settle(ctx, tx, ss)
	if err != nil {
		return nil, nil, err
	}
	return locked, oks, nil
}

// UpdateRuns is store.WorkflowTx's UpdateRuns inside tx: one UpdateRun
// after another (the writer's statements are calls in this process).
func (t Txs) UpdateRuns(ctx context.Context, tx *sql.Tx, rs []store.RunRecord) error {
	for _, r := range rs {
		if err := t.UpdateRun(ctx, tx, r); err != nil {
			return err
		}
	}
	return nil
}

// WritePlan is store.WorkflowTx's WritePlan inside tx: one operation
// after the other (the writer's statements are calls in this process).
func (t Txs) WritePlan(ctx context.Context, tx *sql.Tx, w store.PlanWrite) ([]store.EnqueueResult, error) {
	return store.WritePlanInSteps(ctx, t, tx, w)
}

// WritePlan is store.Store's WritePlan: WritePlan in a transaction of
// its own.
func (s *Store) WritePlan(ctx context.Context, w store.PlanWrite) ([]store.EnqueueResult, error) {
	var res []store.EnqueueResult
	err := s.InTx(ctx, func(tx store.Tx) error {
		var err error
		res, err = tx.WritePlan(ctx, w)
		return err
	})
	return res, err
}

// UpdateRun is store.WorkflowTx's UpdateRun inside tx.
func (Txs) UpdateRun(ctx context.Context, tx *sql.Tx, r store.RunRecord) error {
	return sqldialect.WorkflowUpdateRun(ctx, dialect, runner{q: tx}, r)
}

// PutSteps is store.WorkflowTx's PutSteps inside tx.
func (Txs) PutSteps(ctx context.Context, tx *sql.Tx, steps []store.StepRecord) error {
	return sqldialect.WorkflowPutSteps(ctx, dialect, runner{q: tx}, steps)
}

// TaskStates is store.WorkflowTx's TaskStates inside tx.
func (Txs) TaskStates(ctx context.Context, tx *sql.Tx, taskIDs []string) (map[string]bt.State, error) {
	return sqldialect.TaskStates(ctx, dialect, runner{q: tx}, taskIDs)
}

// AdvanceSchedule is store.ScheduleTx's AdvanceSchedule inside tx.
func (Txs) AdvanceSchedule(ctx context.Context, tx *sql.Tx, a store.ScheduleAdvance) (bool, error) {
	return sqldialect.AdvanceSchedule(ctx, dialect, runner{q: tx}, a)
}

// CloseDeadLetter is store.Tx's CloseDeadLetter inside tx.
func (Txs) CloseDeadLetter(ctx context.Context, tx *sql.Tx, c store.DLQStatusChange) (bool, error) {
	t, err := sqldialect.SetDLQStatusIn(ctx, dialect, &runnerTx{runner: runner{q: tx}, tx: tx}, c)
	return t != nil, err
}

// DeadLetterAs is store.Tx's DeadLetterAs inside tx.
func (Txs) DeadLetterAs(ctx context.Context, tx *sql.Tx, d store.DeadLetterAs) (*bt.Task, error) {
	return sqldialect.DeadLetterAsIn(ctx, dialect, &runnerTx{runner: runner{q: tx}, tx: tx}, d)
}

// SetRunWake is store.WorkflowTx's SetRunWake inside tx.
func (Txs) SetRunWake(ctx context.Context, tx *sql.Tx, runID string, at time.Time) error {
	return sqldialect.WorkflowSetRunWake(ctx, dialect, runner{q: tx}, runID, at)
}

// StepsOfTasks is store.WorkflowTx's StepsOfTasks inside tx.
func (Txs) StepsOfTasks(ctx context.Context, tx *sql.Tx, taskIDs []string) ([]store.StepRecord, error) {
	return sqldialect.WorkflowStepsOfTasks(ctx, dialect, runner{q: tx}, taskIDs)
}
