package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/store"
)

// pipeTx is the store's own transaction (Store.Enqueue's, and the one
// Txs.Begin returns, so every Store.InTx): its BEGIN is sent with its first
// statement, and its COMMIT with its wake-up and the writes held for it
// (holdForCommit: WritePlan's pipeline), each in one pipelined round trip.
// A single enqueue costs two round trips instead of four (begin, insert,
// notify, commit) and a workflow step's settle two instead of five
// (begin, the runs locked, the settle, the plan, commit: Txs.LockRunsSettle
// sends the locks and the settle together). On a busy server
// each round trip is one more wait for the backend to be scheduled
// (docs/benchmarks.md, "Pickup at 1,000 tasks/s" and "Workflow step tasks
// …: the settle's round trips"). The statements and their order are the
// plain transaction's: NOTIFY is delivered at commit wherever it runs in
// the transaction, and a statement that fails makes the server skip the
// rest of its pipeline, COMMIT included; the transaction then rolls back.
//
// A statement whose arguments choose a QueryExecMode (batchArgs: the
// multi-row statements that are not kept prepared; the settle's per-batch
// plan) cannot go in a pipeline; before such a first statement BEGIN is
// sent alone.
//
// A batch of tasks written by COPY that is all the enqueue writes sends
// its wake-up with BEGIN and its event row, and its COMMIT with the COPY
// (copyCommit): two round trips instead of three.
//
// It is a pgx.Tx (Begin is a savepoint; LargeObjects is not supported),
// used by one goroutine at a time.
type pipeTx struct {
	conn   *pgx.Conn
	pooled *pgxpool.Conn // released when the transaction ends (Txs.Begin's); nil: the caller's
	begun  bool          // BEGIN was sent
	done   bool          // Commit or Rollback ended it, or a COPY carried its COMMIT
	copied bool          // the COMMIT went with a COPY and succeeded (copyCommit)
	woken  []string      // queues to wake after the COMMIT (sqlWakeAfterCommit)
	// wakeLost: the COMMIT succeeded and the wake-up after it failed.
	wakeLost bool
	held     *pipeline // writes sent with COMMIT, or before the next statement
	locked   []string  // the runs LockRun(s) locked in this transaction (sorted)
	nested   int       // savepoints begun, for their names

	// onCommit, when set, runs just before the COMMIT is sent, with the
	// queues the transaction wakes (Store.Enqueue: expectWakes); a COPY
	// may then carry the COMMIT. expected is what it was given.
	onCommit func(queues []string)
	expected []string
	waking   []string // the wake-up sent with the event row (firstWaking)
}

// commitsAtCopy says whether a COPY that is the transaction's last
// statement may carry its COMMIT: no writes are held for the COMMIT.
func (t *pipeTx) commitsAtCopy() bool { return t.onCommit != nil && !t.done && t.held == nil }

// willCommit runs onCommit with queues.
func (t *pipeTx) willCommit(queues []string) {
	if t.onCommit != nil {
		t.expected = queues
		t.onCommit(queues)
	}
}

// sqlCopyTasksCommit is a COPY of tasks with the COMMIT of its
// transaction: the server runs the COMMIT once the COPY's rows are in,
// and not at all when the COPY fails.
var sqlCopyTasksCommit = sqlCopyTasks + "; COMMIT"

// firstWaking runs sql (a statement returning one value, scanned into
// dest) with BEGIN before it, if not sent, and the wake-up of queues
// after it, in one round trip (after the held writes, if any). NOTIFY is
// delivered at commit wherever it runs in the transaction.
func (t *pipeTx) firstWaking(ctx context.Context, queues []string, dest *int64, sql string, args ...any) error {
	if sent, err := t.firstRaw(ctx, queues, dest, sql, args); sent { // rawparams.go
		return err
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	if len(queues) > 0 {
		b.Queue(sqlNotifyQueues, queues)
	}
	br := t.SendBatch(ctx, b) // BEGIN first when not sent
	if err := br.QueryRow().Scan(dest); err != nil {
		return errors.Join(err, br.Close())
	}
	if len(queues) > 0 {
		if _, err := br.Exec(); err != nil {
			return errors.Join(fmt.Errorf("notify: %w", err), br.Close())
		}
	}
	t.waking = queues
	return br.Close()
}

// copyCommit sends data, a binary COPY stream of tasks (copyRows), with
// the COMMIT: the transaction's last statement. Its wake-up went before
// it (firstWaking). When the COPY fails the transaction is left to
// Rollback; otherwise it is over, and a later Commit returns nil at once.
func (t *pipeTx) copyCommit(ctx context.Context, data []byte) error {
	if err := t.ready(ctx); err != nil {
		return err
	}
	t.willCommit(t.waking)
	tag, err := copyStreamAs(ctx, t.conn, sqlCopyTasksCommit, data)
	if err != nil {
		return err
	}
	t.end(ctx)
	if tag.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	t.copied = true
	return nil
}

var _ pgx.Tx = (*pipeTx)(nil)

// wakeAtCommit records the queues to NOTIFY, sent after the COMMIT in
// its round trip (sqlWakeAfterCommit).
func (t *pipeTx) wakeAtCommit(queues []string) { t.woken = append(t.woken, queues...) }

// holdForCommit keeps p's statements to send with COMMIT (or before the
// next statement, whichever comes first): p must judge no outcome the
// server could still commit (planPipeline's strict). Their failure is
// reported by that statement or by Commit.
func (t *pipeTx) holdForCommit(p *pipeline) {
	if t.held == nil {
		t.held = p
		return
	}
	t.held.b.QueuedQueries = append(t.held.b.QueuedQueries, p.b.QueuedQueries...)
	t.held.read = append(t.held.read, p.read...)
}

// lockedRuns records runs locked FOR UPDATE in this transaction: they
// exist until it ends.
func (t *pipeTx) lockedRuns(ids ...string) {
	for _, id := range ids {
		if i, ok := slices.BinarySearch(t.locked, id); !ok {
			t.locked = slices.Insert(t.locked, i, id)
		}
	}
}

// holdsRuns says whether every run of rs is locked in this transaction.
func (t *pipeTx) holdsRuns(rs []store.RunRecord) bool {
	for _, r := range rs {
		if _, ok := slices.BinarySearch(t.locked, r.RunID); !ok {
			return false
		}
	}
	return true
}

// sqlNotifyQueues wakes the queues of the array $1: one prepared statement
// for any number of queues, as a pipeline needs.
const sqlNotifyQueues = `SELECT count(pg_notify('` + wakeupChannel + `', q)::text) FROM unnest($1::text[]) q`

// sqlWakeAfterCommit is sqlNotifyQueues sent after a COMMIT, so in a
// transaction of its own.
//
// A transaction that NOTIFYs holds one lock of the whole cluster from
// just before its commit record until its commit is over (PostgreSQL's
// async.c, PreCommit_Notify: the notification queue keeps the commit
// order), its WAL flush included: the commits that notify are
// serialized, one flush each, theirs and every other session's, and
// never share a flush (group commit). A settle batch that enqueues a
// workflow's next steps and a run's start notify; with the NOTIFY in
// their transaction they waited on that lock for most of their commit
// (docs/benchmarks.md, branch wfstep5). Here the data's COMMIT is
// flushed as any other; the wake-up after it wrote no WAL, so its commit
// does not wait for a flush and holds the lock only while its commit
// record is inserted. Losing it (a crash before that record is flushed,
// the connection lost between the two) loses a wake-up, not data:
// workers poll, the fallback. A write of the same round trip that fails
// makes the server skip the rest, the wake-up included; a COMMIT of a
// transaction an earlier round trip aborted answers ROLLBACK without an
// error, and the wake-up after it is a spurious one (a claim that finds
// nothing), never a lost one.
const sqlWakeAfterCommit = sqlNotifyQueues

// pipelinable says whether a statement may go in a pipeline: its
// arguments choose no QueryExecMode.
func pipelinable(args []any) bool {
	if len(args) == 0 {
		return true
	}
	_, mode := args[0].(pgx.QueryExecMode)
	return !mode
}

// flush sends the held writes, with BEGIN when not begun: before any
// other statement, which must see them.
func (t *pipeTx) flush(ctx context.Context) error {
	if t.held == nil {
		return nil
	}
	p := t.held
	t.held = nil
	return p.send(ctx, t)
}

// ready makes the transaction ready for a statement that goes alone: the
// held writes sent, BEGIN sent.
func (t *pipeTx) ready(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	if err := t.flush(ctx); err != nil {
		return err
	}
	if !t.begun {
		t.begun = true
		_, err := t.conn.Exec(ctx, "begin")
		return err
	}
	return nil
}

// SendBatch sends b in the transaction; BEGIN goes first in the same
// round trip when it was not sent yet.
func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.done {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	if err := t.flush(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	if t.begun {
		return t.conn.SendBatch(ctx, b)
	}
	t.begun = true
	withBegin := &pgx.Batch{}
	withBegin.Queue("begin")
	withBegin.QueuedQueries = append(withBegin.QueuedQueries, b.QueuedQueries...)
	br := t.conn.SendBatch(ctx, withBegin)
	if _, err := br.Exec(); err != nil {
		return pgx.FailedBatchResults(b, errors.Join(err, br.Close()))
	}
	return br
}

// first sends the transaction's first statement with BEGIN, and returns
// the batch's results; the caller reads the statement's and closes them.
func (t *pipeTx) first(ctx context.Context, sql string, args []any) pgx.BatchResults {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return t.SendBatch(ctx, b)
}

// alone: the next statement goes by itself (BEGIN sent, or not
// pipelinable), not in first.
func (t *pipeTx) alone(args []any) bool { return t.begun || t.held != nil || !pipelinable(args) }

func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.alone(args) {
		if err := t.ready(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.conn.Exec(ctx, sql, args...)
	}
	br := t.first(ctx, sql, args)
	tag, err := br.Exec()
	return tag, errors.Join(err, br.Close())
}

func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.alone(args) {
		if err := t.ready(ctx); err != nil {
			return nil, err
		}
		return t.conn.Query(ctx, sql, args...)
	}
	br := t.first(ctx, sql, args)
	rs, err := br.Query()
	if err != nil {
		return nil, errors.Join(err, br.Close())
	}
	return closingRows{Rows: rs, br: br}, nil
}

func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rs, err := t.Query(ctx, sql, args...)
	return firstRow{rs: rs, err: err}
}

func (t *pipeTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.ready(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, cols, src)
}

func (t *pipeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

// LargeObjects is not supported on the store's transaction.
func (t *pipeTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *pipeTx) Conn() *pgx.Conn { return t.conn }

// Begin starts a savepoint: its Commit releases it, its Rollback rolls
// back to it.
func (t *pipeTx) Begin(ctx context.Context) (pgx.Tx, error) {
	t.nested++
	sp := &pipeSavepoint{pipeTx: t, name: fmt.Sprintf("backstop_sp_%d", t.nested)}
	if _, err := t.Exec(ctx, "SAVEPOINT "+sp.name); err != nil {
		return nil, err
	}
	return sp, nil
}

// Commit sends the held writes, COMMIT and the wake-up in one round trip
// (with BEGIN when nothing was sent yet; nothing when nothing was
// written; the wake-up after the COMMIT, sqlWakeAfterCommit), after onCommit has run with the queues it wakes; it returns
// nil at once when a COPY already carried the COMMIT (copyCommit). A held
// write's failure is the error as its statement reported it; a
// transaction the server ended as a rollback (an earlier failure) is
// pgx.ErrTxCommitRollback. However it ends, the transaction is over.
func (t *pipeTx) Commit(ctx context.Context) error {
	if t.done {
		if t.copied { // committed with its COPY
			return nil
		}
		return pgx.ErrTxClosed
	}
	p := t.held
	t.held = nil
	if p == nil {
		if !t.begun {
			t.end(ctx)
			return nil
		}
		p = &pipeline{}
	}
	t.willCommit(t.woken)
	committed := false
	p.b.Queue("commit")
	p.read = append(p.read, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		if err == nil && tag.String() != "COMMIT" {
			err = pgx.ErrTxCommitRollback
		}
		committed = err == nil
		return err
	})
	if len(t.woken) > 0 {
		// After the COMMIT, in the same round trip: its own transaction
		// (the server skips it when the transaction failed).
		p.exec(sqlWakeAfterCommit, []any{t.woken}, wrapped("notify"))
	}
	err := p.send(ctx, t)
	t.end(ctx)
	if committed && err != nil {
		// Only the wake-up failed: the transaction is committed, and
		// workers find its tasks by polling (DESIGN: the fallback).
		t.wakeLost = true
		err = nil
	}
	return err
}

// Rollback rolls back what was sent; the held writes are dropped unsent.
func (t *pipeTx) Rollback(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.held = nil
	t.end(ctx)
	return nil
}

// end ends the transaction: a ROLLBACK when the connection is still in
// one (a failure skipped the COMMIT, or there was none), and the pooled
// connection released (closed by the pool if the ROLLBACK failed too).
func (t *pipeTx) end(ctx context.Context) {
	t.done = true
	if t.conn.PgConn().TxStatus() != 'I' {
		_, _ = t.conn.Exec(context.WithoutCancel(ctx), "rollback")
	}
	if t.pooled != nil {
		t.pooled.Release()
		t.pooled = nil
	}
}

// The dbtx and copier methods, for the enqueue.

func (t *pipeTx) exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.Exec(ctx, sql, args...)
	return err
}

func (t *pipeTx) query(ctx context.Context, sql string, args ...any) (rows, error) {
	return t.Query(ctx, sql, args...)
}

func (t *pipeTx) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.QueryRow(ctx, sql, args...)
}

func (t *pipeTx) copyFrom(ctx context.Context, data []byte) error {
	if err := t.ready(ctx); err != nil {
		return err
	}
	return copyStream(ctx, t.conn, data)
}

func (t *pipeTx) batchArgs(rows int, args []any) []any { return pgxTx{}.batchArgs(rows, args) }

func (t *pipeTx) savepoint(ctx context.Context) (func(context.Context) error, func(context.Context) error, error) {
	return pgxTx{t}.savepoint(ctx)
}

// pipeSavepoint is a savepoint of a pipeTx: its statements are the
// transaction's.
type pipeSavepoint struct {
	*pipeTx
	name string
	over bool
}

// Commit releases the savepoint.
func (s *pipeSavepoint) Commit(ctx context.Context) error {
	if s.over {
		return pgx.ErrTxClosed
	}
	s.over = true
	_, err := s.pipeTx.Exec(ctx, "RELEASE SAVEPOINT "+s.name)
	return err
}

// Rollback undoes what was written since the savepoint, and releases it.
func (s *pipeSavepoint) Rollback(ctx context.Context) error {
	if s.over {
		return pgx.ErrTxClosed
	}
	s.over = true
	if _, err := s.pipeTx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+s.name); err != nil {
		return err
	}
	_, err := s.pipeTx.Exec(ctx, "RELEASE SAVEPOINT "+s.name)
	return err
}

// closingRows are a pipelined statement's rows; closing them closes the
// batch's results.
type closingRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r closingRows) Close() {
	r.Rows.Close()
	_ = r.br.Close() // the statement's error is the rows' Err
}

// firstRow is QueryRow over query: the first row, or pgx.ErrNoRows.
type firstRow struct {
	rs  rows
	err error
}

func (r firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rs.Close()
	if !r.rs.Next() {
		if err := r.rs.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rs.Scan(dest...); err != nil {
		return err
	}
	r.rs.Close()
	return r.rs.Err()
}
