package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// This file is the seam's composable transactions (docs/architecture.md,
// "Transactions the engine composes"): the writes that must be able to
// share one commit — settle attempts, enqueue tasks, append events — so
// that the engine can, say, settle a workflow step and enqueue its
// successors atomically.
//
// Each driver implements TxStore for its own transaction type (pgstore:
// pgx.Tx, sqlitestore: *sql.Tx), checked by the compiler. The engine,
// which only knows store.Store, uses Store.InTx and the driver-neutral Tx
// handle it passes; RunInTx builds that from any TxStore, so the
// begin/commit/rollback rules are written once.

// Tx is one open transaction of a store, bound to it: the writes the engine
// composes. Each does exactly what the Store method of the same name does
// (same checks, same events, written in this transaction: invariant 5),
// and none commits. Once an operation returned an error the transaction can
// only roll back: later operations return that error again, and InTx rolls
// back even if its function returns nil (a failed statement aborts a
// Postgres transaction; SQLite may hold part of the failed operation). A
// driver may send an operation's statements with a later one's or with
// the commit (pgstore: WritePlan of runs locked in the transaction goes
// with the COMMIT): its failure is then that operation's or the commit's,
// and nothing of the transaction is written.
type Tx interface {
	// Settle is Store.Settle inside the transaction.
	Settle(ctx context.Context, s []Settlement) ([]bool, error)
	// LockRunsSettle is LockRuns(runIDs), then Settle(s), in that order in
	// the transaction (the runs are locked before the settle writes, as a
	// step settle needs: a run's events keep the order of the
	// transactions that advance it), answering both. A driver may send the
	// two in one round trip (pgstore: one pipeline). After an error of
	// either, the transaction must roll back.
	LockRunsSettle(ctx context.Context, runIDs []string, s []Settlement) ([]LockedRun, []bool, error)
	// Enqueue is Store.Enqueue inside the transaction.
	Enqueue(ctx context.Context, tasks []*bt.Task, opts EnqueueOpts) ([]EnqueueResult, error)
	// AppendEvents writes events built by the engine, as given (actor
	// included), in their order (CheckEvents says which it refuses).
	AppendEvents(ctx context.Context, events []bt.Event) error
	// WorkflowTx: a workflow run's and its steps' writes and the run's
	// lock (store/workflows.go).
	WorkflowTx
	// ScheduleTx: a schedule's advance past its ticks (store/schedules.go).
	ScheduleTx
	// CloseDeadLetter is Store.SetDLQStatus inside the transaction, except
	// that a task which is not an open dead letter is left alone (false)
	// rather than an error.
	CloseDeadLetter(ctx context.Context, c DLQStatusChange) (bool, error)
	// DeadLetterAs moves a succeeded task to the DLQ with the reason and
	// last error of another task, already dead (a workflow step's task
	// whose sink message dead-lettered, under on_sink_fail: dead_letter),
	// and writes its task.dead_lettered event. Its executions are left as
	// they are: no attempt is invented. It returns the dead letter; a task
	// that is not succeeded, or a cause that is not dead, leaves everything
	// alone (nil).
	DeadLetterAs(ctx context.Context, d DeadLetterAs) (*bt.Task, error)
}

// DeadLetterAs is a succeeded task (ID) that becomes a dead letter because
// another task (Cause) did: it takes the cause's dead_reason and last
// error. Event is its task.dead_lettered event (queue and kind filled in
// by the store).
type DeadLetterAs struct {
	ID, Cause string
	Now       time.Time
	Event     bt.Event
}

// TxStore is a driver's composable writes on its own transaction type TX.
// Begin starts a transaction that Commit or Rollback ends; Settle, Enqueue
// and AppendEvents write inside a transaction of that type (one Begin
// returned, or on drivers that say so one the caller began) and never
// commit it. After one of them failed, the transaction must be rolled back.
type TxStore[TX any] interface {
	Begin(ctx context.Context) (TX, error)
	Commit(ctx context.Context, tx TX) error
	Rollback(ctx context.Context, tx TX) error
	Settle(ctx context.Context, tx TX, s []Settlement) ([]bool, error)
	Enqueue(ctx context.Context, tx TX, tasks []*bt.Task, opts EnqueueOpts) ([]EnqueueResult, error)
	AppendEvents(ctx context.Context, tx TX, events []bt.Event) error
	// The workflow writes (store/workflows.go, WorkflowTx) in tx.
	InsertRun(ctx context.Context, tx TX, r RunRecord) error
	LockRun(ctx context.Context, tx TX, runID string) (*RunRecord, []StepRecord, error)
	LockRuns(ctx context.Context, tx TX, runIDs []string) ([]LockedRun, error)
	LockRunsSettle(ctx context.Context, tx TX, runIDs []string, s []Settlement) ([]LockedRun, []bool, error)
	UpdateRun(ctx context.Context, tx TX, r RunRecord) error
	UpdateRuns(ctx context.Context, tx TX, rs []RunRecord) error
	PutSteps(ctx context.Context, tx TX, steps []StepRecord) error
	SetRunWake(ctx context.Context, tx TX, runID string, at time.Time) error
	StepsOfTasks(ctx context.Context, tx TX, taskIDs []string) ([]StepRecord, error)
	TaskStates(ctx context.Context, tx TX, taskIDs []string) (map[string]bt.State, error)
	WritePlan(ctx context.Context, tx TX, w PlanWrite) ([]EnqueueResult, error)
	// The schedules' write (store/schedules.go, ScheduleTx) in tx.
	AdvanceSchedule(ctx context.Context, tx TX, a ScheduleAdvance) (bool, error)
	CloseDeadLetter(ctx context.Context, tx TX, c DLQStatusChange) (bool, error)
	DeadLetterAs(ctx context.Context, tx TX, d DeadLetterAs) (*bt.Task, error)
}

// ErrTxDone is returned by a Tx's operations once its InTx returned.
var ErrTxDone = errors.New("store: the transaction is over (its InTx returned)")

// RunInTx is Store.InTx for a driver's TxStore: it begins a transaction,
// runs fn with it, and commits when fn returns nil and no operation failed;
// otherwise (fn's error, a failed operation, a panic) it rolls back and
// nothing fn wrote remains. The returned error is fn's, else the failed
// operation's, else the commit's.
func RunInTx[TX any](ctx context.Context, ts TxStore[TX], fn func(Tx) error) error {
	tx, err := ts.Begin(ctx)
	if err != nil {
		return err
	}
	b := &boundTx[TX]{ts: ts, tx: tx}
	committed := false
	defer func() {
		b.over = true
		if !committed {
			_ = ts.Rollback(context.WithoutCancel(ctx), tx) // the error that brought us here is the one to report
		}
	}()
	if err := fn(b); err != nil {
		return err
	}
	if b.err != nil {
		return fmt.Errorf("store: an operation failed, the transaction rolled back: %w", b.err)
	}
	b.over = true
	if err := ts.Commit(ctx, tx); err != nil {
		return err
	}
	committed = true
	return nil
}

// Bind is the Tx handle of a transaction of ts the caller began and will
// end itself (after a failed operation: with Rollback).
func Bind[TX any](ts TxStore[TX], tx TX) Tx { return &boundTx[TX]{ts: ts, tx: tx} }

// boundTx is a TxStore's transaction as a Tx. It is used by one goroutine
// at a time, as a transaction is.
type boundTx[TX any] struct {
	ts   TxStore[TX]
	tx   TX
	err  error // the first failed operation's: the transaction only rolls back now
	over bool  // InTx returned
}

func (b *boundTx[TX]) check() error {
	if b.over {
		return ErrTxDone
	}
	if b.err != nil {
		return fmt.Errorf("store: an earlier operation of this transaction failed: %w", b.err)
	}
	return nil
}

func (b *boundTx[TX]) failed(err error) error {
	if err != nil && b.err == nil {
		b.err = err
	}
	return err
}

func (b *boundTx[TX]) Settle(ctx context.Context, s []Settlement) ([]bool, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	applied, err := b.ts.Settle(ctx, b.tx, s)
	return applied, b.failed(err)
}

func (b *boundTx[TX]) Enqueue(ctx context.Context, tasks []*bt.Task, opts EnqueueOpts) ([]EnqueueResult, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	res, err := b.ts.Enqueue(ctx, b.tx, tasks, opts)
	return res, b.failed(err)
}

func (b *boundTx[TX]) AppendEvents(ctx context.Context, events []bt.Event) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.failed(b.ts.AppendEvents(ctx, b.tx, events))
}

func (b *boundTx[TX]) InsertRun(ctx context.Context, r RunRecord) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.failed(b.ts.InsertRun(ctx, b.tx, r))
}

func (b *boundTx[TX]) LockRun(ctx context.Context, runID string) (*RunRecord, []StepRecord, error) {
	if err := b.check(); err != nil {
		return nil, nil, err
	}
	r, steps, err := b.ts.LockRun(ctx, b.tx, runID)
	return r, steps, b.failed(err)
}

func (b *boundTx[TX]) LockRuns(ctx context.Context, runIDs []string) ([]LockedRun, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	runs, err := b.ts.LockRuns(ctx, b.tx, runIDs)
	return runs, b.failed(err)
}

func (b *boundTx[TX]) LockRunsSettle(ctx context.Context, runIDs []string, s []Settlement) ([]LockedRun, []bool, error) {
	if err := b.check(); err != nil {
		return nil, nil, err
	}
	runs, applied, err := b.ts.LockRunsSettle(ctx, b.tx, runIDs, s)
	return runs, applied, b.failed(err)
}

func (b *boundTx[TX]) UpdateRuns(ctx context.Context, rs []RunRecord) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.failed(b.ts.UpdateRuns(ctx, b.tx, rs))
}

func (b *boundTx[TX]) SetRunWake(ctx context.Context, runID string, at time.Time) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.failed(b.ts.SetRunWake(ctx, b.tx, runID, at))
}

func (b *boundTx[TX]) UpdateRun(ctx context.Context, r RunRecord) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.failed(b.ts.UpdateRun(ctx, b.tx, r))
}

func (b *boundTx[TX]) PutSteps(ctx context.Context, steps []StepRecord) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.failed(b.ts.PutSteps(ctx, b.tx, steps))
}

func (b *boundTx[TX]) StepsOfTasks(ctx context.Context, taskIDs []string) ([]StepRecord, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	steps, err := b.ts.StepsOfTasks(ctx, b.tx, taskIDs)
	return steps, b.failed(err)
}

func (b *boundTx[TX]) TaskStates(ctx context.Context, taskIDs []string) (map[string]bt.State, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	states, err := b.ts.TaskStates(ctx, b.tx, taskIDs)
	return states, b.failed(err)
}

func (b *boundTx[TX]) WritePlan(ctx context.Context, w PlanWrite) ([]EnqueueResult, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	res, err := b.ts.WritePlan(ctx, b.tx, w)
	return res, b.failed(err)
}

func (b *boundTx[TX]) AdvanceSchedule(ctx context.Context, a ScheduleAdvance) (bool, error) {
	if err := b.check(); err != nil {
		return false, err
	}
	ok, err := b.ts.AdvanceSchedule(ctx, b.tx, a)
	return ok, b.failed(err)
}

func (b *boundTx[TX]) CloseDeadLetter(ctx context.Context, c DLQStatusChange) (bool, error) {
	if err := b.check(); err != nil {
		return false, err
	}
	ok, err := b.ts.CloseDeadLetter(ctx, b.tx, c)
	return ok, b.failed(err)
}

func (b *boundTx[TX]) DeadLetterAs(ctx context.Context, d DeadLetterAs) (*bt.Task, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	t, err := b.ts.DeadLetterAs(ctx, b.tx, d)
	return t, b.failed(err)
}

// CheckEvents refuses events the log cannot hold, before a driver writes
// any: each needs a type and a time, and its body is empty (written as {})
// or a JSON object.
func CheckEvents(events []bt.Event) error {
	for i, e := range events {
		switch {
		case e.Type == "":
			return fmt.Errorf("store: append events: event %d has no type", i)
		case e.Time.IsZero():
			return fmt.Errorf("store: append events: event %d (%s) has no time", i, e.Type)
		case len(e.Body) > 0 && !isJSONObject(e.Body):
			return fmt.Errorf("store: append events: event %d (%s): body is not a JSON object", i, e.Type)
		}
	}
	return nil
}

func isJSONObject(b []byte) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil && m != nil
}
