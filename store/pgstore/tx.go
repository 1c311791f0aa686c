package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// Txs is the store's composable writes inside a pgx.Tx: store.TxStore for
// pgx.Tx. The transaction may be one Begin returned or one the caller
// began on any connection to the same database (the caller then commits).
// Each operation runs the statements of the Store method of the same name
// (Settle: the same one statement), so it costs no more round trips; none
// sets a savepoint, so after one failed the transaction must roll back
// (Store.EnqueueTx, the library's outbox, keeps its savepoint).
type Txs struct{ s *Store }

var _ store.TxStore[pgx.Tx] = Txs{}

// Txs returns the store's writes inside a pgx.Tx.
func (s *Store) Txs() Txs { return Txs{s} }

// InTx implements store.Store (store.RunInTx over Txs).
func (s *Store) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return store.RunInTx(ctx, Txs{s}, fn)
}

// Begin starts a transaction on a connection of the store's pool: the
// store's own (pipetx.go), whose BEGIN is sent with its first statement and
// whose COMMIT goes with its last writes, so it costs no round trip of its
// own. It holds the connection until Commit or Rollback.
func (t Txs) Begin(ctx context.Context) (pgx.Tx, error) {
	conn, err := t.s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: begin: %w", err)
	}
	return &pipeTx{conn: conn.Conn(), pooled: conn}, nil
}

// Commit commits tx.
func (Txs) Commit(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: commit: %w", err)
	}
	return nil
}

// Rollback rolls tx back.
func (Txs) Rollback(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Rollback(ctx); err != nil {
		return fmt.Errorf("pgstore: rollback: %w", err)
	}
	return nil
}

// Settle is Store.Settle inside tx. Queues woken by it are notified when
// tx commits (NOTIFY is transactional).
func (t Txs) Settle(ctx context.Context, tx pgx.Tx, settlements []store.Settlement) ([]bool, error) {
	return t.s.settle(ctx, tx, settlements)
}

// Enqueue is Store.Enqueue inside tx.
func (t Txs) Enqueue(ctx context.Context, tx pgx.Tx, tasks []*bt.Task, opts store.EnqueueOpts) ([]store.EnqueueResult, error) {
	if err := checkEnqueue(tasks, opts); err != nil || len(tasks) == 0 {
		return []store.EnqueueResult{}, err
	}
	db := dbtxOf(tx)
	if !worthCopying(len(tasks)) {
		return enqueue(ctx, db, tasks, opts, "")
	}
	// A COPY that meets a taken id aborts the caller's transaction up to
	// the savepoint only; the INSERTs then report the id (copy.go).
	return t.s.enqueueCopying(func(copyEvents string) ([]store.EnqueueResult, error) {
		return enqueueInSavepoint(ctx, db, tasks, opts, copyEvents)
	})
}

// dbtxOf is tx as the enqueue's: the store's own transaction sends the
// wake-up with its COMMIT.
func dbtxOf(tx pgx.Tx) dbtx {
	if p, ok := tx.(*pipeTx); ok {
		return p
	}
	return pgxTx{tx}
}

// AppendEvents writes events inside tx, one log row each (events.go).
func (Txs) AppendEvents(ctx context.Context, tx pgx.Tx, events []bt.Event) error {
	if err := store.CheckEvents(events); err != nil {
		return err
	}
	return insertEventsScalar(ctx, pgxTx{tx}, events)
}

// InsertRun is store.WorkflowTx's InsertRun inside tx.
func (Txs) InsertRun(ctx context.Context, tx pgx.Tx, r store.RunRecord) error {
	return sqldialect.WorkflowInsertRun(ctx, dialect, runner{q: tx}, r)
}

// LockRun is store.WorkflowTx's LockRun inside tx: SELECT … FOR UPDATE on
// the run's row, held until tx ends.
func (Txs) LockRun(ctx context.Context, tx pgx.Tx, runID string) (*store.RunRecord, []store.StepRecord, error) {
	run, steps, err := sqldialect.WorkflowLockRun(ctx, dialect, runner{q: tx}, runID)
	if p, ok := tx.(*pipeTx); ok && err == nil && run != nil {
		p.lockedRuns(run.RunID)
	}
	return run, steps, err
}

// LockRuns is store.WorkflowTx's LockRuns inside tx: SELECT … ORDER BY
// run_id FOR UPDATE (the rows are locked in that order), then the steps'
// SELECT, sent together in one round trip (a pipeline: the server runs the
// second, with a snapshot of its own, once the first holds its locks).
func (Txs) LockRuns(ctx context.Context, tx pgx.Tx, runIDs []string) ([]store.LockedRun, error) {
	if len(runIDs) == 0 {
		return []store.LockedRun{}, nil
	}
	var b pgx.Batch
	queueLockRuns(&b, runIDs)
	br := tx.SendBatch(ctx, &b)
	out, err := lockedRunsOf(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("pgstore: lock runs: %w", permission(cerr))
	}
	if err != nil {
		return nil, err
	}
	if p, ok := tx.(*pipeTx); ok {
		for _, l := range out {
			p.lockedRuns(l.Run.RunID)
		}
	}
	return out, nil
}

// LockRunsSettle is store.Tx's LockRunsSettle inside tx: LockRuns' two
// statements and the settle's one (Settle's, the same statement) sent
// together, one round trip where LockRuns and Settle took two (a step
// settle's transaction: begin with the runs' locks and the settle, then
// the plan's writes with the COMMIT). The server runs them in order, so
// the runs are locked before the settle writes; a statement that fails
// makes it skip the rest (the transaction then rolls back).
func (t Txs) LockRunsSettle(ctx context.Context, tx pgx.Tx, runIDs []string, ss []store.Settlement) ([]store.LockedRun, []bool, error) {
	if len(runIDs) == 0 {
		oks, err := t.Settle(ctx, tx, ss)
		if err != nil {
			return nil, nil, err
		}
		return []store.LockedRun{}, oks, nil
	}
	q := &lockingQuerier{tx: tx, runIDs: runIDs}
	oks, err := t.s.settle(ctx, q, ss)
	if q.br != nil {
		if cerr := q.br.Close(); err == nil && q.lockErr == nil && cerr != nil {
			err = fmt.Errorf("pgstore: settle: %w", cerr)
		}
	}
	switch {
	case q.lockErr != nil:
		return nil, nil, q.lockErr
	case err != nil:
		return nil, nil, err
	case !q.sent: // the settle sent nothing (no settlements): the locks alone
		locked, err := t.LockRuns(ctx, tx, runIDs)
		if err != nil {
			return nil, nil, err
		}
		return locked, oks, nil
	}
	if p, ok := tx.(*pipeTx); ok {
		for _, l := range q.locked {
			p.lockedRuns(l.Run.RunID)
		}
	}
	return q.locked, oks, nil
}

// lockingQuerier is the querier Store.settle runs its statement on for
// LockRunsSettle: the statement goes in one batch after LockRuns' two;
// their results are read (locked, lockErr) before the settle's rows are
// answered. br is closed by LockRunsSettle once the settle read them.
type lockingQuerier struct {
	tx      pgx.Tx
	runIDs  []string
	sent    bool
	br      pgx.BatchResults
	locked  []store.LockedRun
	lockErr error
}

func (q *lockingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	var b pgx.Batch
	queueLockRuns(&b, q.runIDs)
	b.Queue(sql, args...)
	q.sent = true
	q.br = q.tx.SendBatch(ctx, &b)
	if q.locked, q.lockErr = lockedRunsOf(q.br); q.lockErr != nil {
		return nil, q.lockErr
	}
	return q.br.Query()
}

// sqlLockRuns and sqlLockedSteps are LockRuns' two statements, which find
// the runs and their steps by the primary keys from any generic plan
// (sqldialect.WorkflowLockRunsKeyedSQL).
var sqlLockRuns, sqlLockedSteps = sqldialect.WorkflowLockRunsKeyedSQL()

// queueLockRuns adds LockRuns' two statements to b, for the distinct ids of
// runIDs (a run named twice is locked and read once).
func queueLockRuns(b *pgx.Batch, runIDs []string) {
	runIDs = slices.Compact(slices.Sorted(slices.Values(runIDs)))
	b.Queue(sqlLockRuns, runIDs)
	b.Queue(sqlLockedSteps, runIDs)
}

// lockedRunsOf reads LockRuns' two results from br.
func lockedRunsOf(br pgx.BatchResults) ([]store.LockedRun, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("pgstore: lock runs: %w", permission(err))
	}
	out, err := sqldialect.ScanLockedRuns(dialect, runnerRows{rows})
	if err != nil {
		return nil, err
	}
	srows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("pgstore: lock runs: %w", permission(err))
	}
	return sqldialect.AddLockedSteps(dialect, out, runnerRows{srows})
}

// UpdateRuns is store.WorkflowTx's UpdateRuns inside tx: one UPDATE … FROM
// unnest(the runs' columns as arrays), one round trip however many runs.
func (t Txs) UpdateRuns(ctx context.Context, tx pgx.Tx, rs []store.RunRecord) error {
	switch len(rs) {
	case 0:
		return nil
	case 1:
		return t.UpdateRun(ctx, tx, rs[0])
	}
	sql, args := updateRunsSQL(rs)
	tag, err := tx.Exec(ctx, sql, args...)
	return updateRunsResult(rs, tag, err)
}

// updateRunsSQL is UpdateRuns' statement (sqlUpdateRuns) and its arguments.
func updateRunsSQL(rs []store.RunRecord) (string, []any) {
	ids, states, errs := make([]string, len(rs)), make([]string, len(rs)), make([]string, len(rs))
	seqs, updated, finished := make([]int64, len(rs)), make([]time.Time, len(rs)), make([]*time.Time, len(rs))
	for i, r := range rs {
		ids[i], states[i], errs[i], seqs[i], updated[i], finished[i] = r.RunID, string(r.State), r.Error, r.Seq, r.UpdatedAt, r.FinishedAt
	}
	return sqlUpdateRuns, []any{ids, states, errs, seqs, updated, finished}
}

// sqlUpdateRuns is UpdateRuns' statement. The condition on v.idx, true of
// every element, makes the planner expect one: its generic plan finds
// each run by the primary key whatever the table's size and statistics
// (with the join alone it hashed the input and scanned the table, as a
// plan made on a small table keeps doing as it grows:
// sqldialect.WorkflowLockRunsKeyedSQL).
const sqlUpdateRuns = `UPDATE backstop_runs r SET state = v.state, error = v.error, seq = v.seq,
		updated_at = v.updated_at, finished_at = v.finished_at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::timestamptz[])
			WITH ORDINALITY AS v(run_id, state, error, seq, updated_at, finished_at, idx)
		WHERE v.idx BETWEEN 1 AND cardinality($1::text[]) AND r.run_id = v.run_id`

// updateRunsResult is UpdateRuns' outcome from its statement's.
func updateRunsResult(rs []store.RunRecord, tag pgconn.CommandTag, err error) error {
	if err != nil {
		return fmt.Errorf("pgstore: update runs: %w", permission(err))
	}
	if n := tag.RowsAffected(); n != int64(len(rs)) {
		return fmt.Errorf("%d of %d runs: %w", n, len(rs), store.ErrNotFound)
	}
	return nil
}

// UpdateRun is store.WorkflowTx's UpdateRun inside tx.
func (Txs) UpdateRun(ctx context.Context, tx pgx.Tx, r store.RunRecord) error {
	return sqldialect.WorkflowUpdateRun(ctx, dialect, runner{q: tx}, r)
}

// PutSteps is store.WorkflowTx's PutSteps inside tx.
func (Txs) PutSteps(ctx context.Context, tx pgx.Tx, steps []store.StepRecord) error {
	return sqldialect.WorkflowPutSteps(ctx, dialect, runner{q: tx}, steps)
}

// TaskStates is store.WorkflowTx's TaskStates inside tx.
func (Txs) TaskStates(ctx context.Context, tx pgx.Tx, taskIDs []string) (map[string]bt.State, error) {
	return sqldialect.TaskStates(ctx, dialect, runner{q: tx}, taskIDs)
}

// AdvanceSchedule is store.ScheduleTx's AdvanceSchedule inside tx.
func (Txs) AdvanceSchedule(ctx context.Context, tx pgx.Tx, a store.ScheduleAdvance) (bool, error) {
	return sqldialect.AdvanceSchedule(ctx, dialect, runner{q: tx}, a)
}

// CloseDeadLetter is store.Tx's CloseDeadLetter inside tx.
func (Txs) CloseDeadLetter(ctx context.Context, tx pgx.Tx, c store.DLQStatusChange) (bool, error) {
	t, err := sqldialect.SetDLQStatusIn(ctx, dialect, runnerTx{runner{q: tx}, tx}, c)
	return t != nil, err
}

// DeadLetterAs is store.Tx's DeadLetterAs inside tx.
// The dead letter gets its group's fingerprint (DLQGroups) from the reason
// and error it took over.
func (Txs) DeadLetterAs(ctx context.Context, tx pgx.Tx, d store.DeadLetterAs) (*bt.Task, error) {
	t, err := sqldialect.DeadLetterAsIn(ctx, dialect, runnerTx{runner{q: tx}, tx}, d)
	if err != nil || t == nil {
		return t, err
	}
	if _, err := tx.Exec(ctx, `UPDATE backstop_tasks SET dlq_group = backstop_dlq_group(dead_reason, last_error)
		WHERE id = $1 AND state = 'dead'`, t.ID); err != nil {
		return nil, fmt.Errorf("pgstore: dead letter %s: its group: %w", t.ID, err)
	}
	return t, nil
}

// SetRunWake is store.WorkflowTx's SetRunWake inside tx.
func (Txs) SetRunWake(ctx context.Context, tx pgx.Tx, runID string, at time.Time) error {
	return sqldialect.WorkflowSetRunWake(ctx, dialect, runner{q: tx}, runID, at)
}

// StepsOfTasks is store.WorkflowTx's StepsOfTasks inside tx.
func (Txs) StepsOfTasks(ctx context.Context, tx pgx.Tx, taskIDs []string) ([]store.StepRecord, error) {
	return sqldialect.WorkflowStepsOfTasks(ctx, dialect, runner{q: tx}, taskIDs)
}
