package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// pipeTx is Store.Enqueue's transaction: its BEGIN is sent with its first
// statement and its wake-up with its COMMIT, each pair in one pipelined
// round trip, so that a single enqueue costs two round trips instead of
// four (begin, insert, notify, commit). On a busy server each round trip
// is one more wait for the backend to be scheduled, and a single enqueue's
// latency is mostly those waits (docs/benchmarks.md, "Pickup at 1,000
// tasks/s"). The statements and their order are the plain transaction's:
// NOTIFY is delivered at commit wherever it runs in the transaction.
//
// A statement whose arguments choose a QueryExecMode (batchArgs: the
// multi-row statements that are not kept prepared) cannot go in a
// pipeline; before such a first statement BEGIN is sent alone.
//
// A batch of tasks written by COPY that is all the enqueue writes sends
// its wake-up with BEGIN and its event row, and its COMMIT with the COPY
// (copyCommit): two round trips instead of three.
type pipeTx struct {
	conn  *pgx.Conn
	begun bool // BEGIN was sent
	done  bool // COMMIT succeeded or ROLLBACK was sent
	woken []string

	// onCommit, when set, runs just before the COMMIT is sent, with the
	// queues the transaction wakes (Store.Enqueue: expectWakes); a COPY
	// may then carry the COMMIT. expected is what it was given.
	onCommit func(queues []string)
	expected []string
	waking   []string // the wake-up sent with the event row (firstWaking)
}

// commitsAtCopy says whether a COPY that is the transaction's last
// statement may carry its COMMIT.
func (t *pipeTx) commitsAtCopy() bool { return t.onCommit != nil && !t.done }

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
// after it, in one round trip. NOTIFY is delivered at commit wherever it
// runs in the transaction.
func (t *pipeTx) firstWaking(ctx context.Context, queues []string, dest any, sql string, args ...any) error {
	b := &pgx.Batch{}
	begin := !t.begun
	if begin {
		b.Queue("begin")
	}
	b.Queue(sql, args...)
	if len(queues) > 0 {
		b.Queue(sqlNotifyQueues, queues)
	}
	t.begun = true
	br := t.conn.SendBatch(ctx, b)
	if begin {
		if _, err := br.Exec(); err != nil {
			return errors.Join(err, br.Close())
		}
	}
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
// it (firstWaking).
func (t *pipeTx) copyCommit(ctx context.Context, data []byte) error {
	t.willCommit(t.waking)
	tag, err := copyStreamAs(ctx, t.conn, sqlCopyTasksCommit, data)
	if err != nil {
		return err
	}
	t.done = true
	if tag.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// wakeAtCommit records the queues to NOTIFY, sent with the COMMIT.
func (t *pipeTx) wakeAtCommit(queues []string) { t.woken = append(t.woken, queues...) }

// sqlNotifyQueues wakes the queues of the array $1: one prepared statement
// for any number of queues, as a pipeline needs.
const sqlNotifyQueues = `SELECT count(pg_notify('` + wakeupChannel + `', q)::text) FROM unnest($1::text[]) q`

// pipelinable says whether a statement may go in a pipeline: its
// arguments choose no QueryExecMode.
func pipelinable(args []any) bool {
	if len(args) == 0 {
		return true
	}
	_, mode := args[0].(pgx.QueryExecMode)
	return !mode
}

// first sends BEGIN and the transaction's first statement together, and
// returns the batch's results with BEGIN's read; the caller reads the
// statement's and closes them.
func (t *pipeTx) first(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	t.begun = true
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		return nil, errors.Join(err, br.Close())
	}
	return br, nil
}

// begin sends BEGIN alone, when the first statement cannot be pipelined.
func (t *pipeTx) begin(ctx context.Context) error {
	t.begun = true
	_, err := t.conn.Exec(ctx, "begin")
	return err
}

func (t *pipeTx) exec(ctx context.Context, sql string, args ...any) error {
	if !t.begun && pipelinable(args) {
		br, err := t.first(ctx, sql, args)
		if err != nil {
			return err
		}
		_, err = br.Exec()
		return errors.Join(err, br.Close())
	}
	if !t.begun {
		if err := t.begin(ctx); err != nil {
			return err
		}
	}
	_, err := t.conn.Exec(ctx, sql, args...)
	return err
}

func (t *pipeTx) query(ctx context.Context, sql string, args ...any) (rows, error) {
	if !t.begun && pipelinable(args) {
		br, err := t.first(ctx, sql, args)
		if err != nil {
			return nil, err
		}
		rs, err := br.Query()
		if err != nil {
			return nil, errors.Join(err, br.Close())
		}
		return closingRows{Rows: rs, br: br}, nil
	}
	if !t.begun {
		if err := t.begin(ctx); err != nil {
			return nil, err
		}
	}
	return t.conn.Query(ctx, sql, args...)
}

func (t *pipeTx) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rs, err := t.query(ctx, sql, args...)
	return firstRow{rs: rs, err: err}
}

func (t *pipeTx) copyFrom(ctx context.Context, data []byte) error {
	if !t.begun {
		if err := t.begin(ctx); err != nil {
			return err
		}
	}
	return copyStream(ctx, t.conn, data)
}

func (t *pipeTx) batchArgs(rows int, args []any) []any { return pgxTx{}.batchArgs(rows, args) }

func (t *pipeTx) savepoint(ctx context.Context) (func(context.Context) error, func(context.Context) error, error) {
	if err := t.exec(ctx, "SAVEPOINT backstop_enqueue"); err != nil {
		return nil, nil, err
	}
	release := func(ctx context.Context) error { return t.exec(ctx, "RELEASE SAVEPOINT backstop_enqueue") }
	rollback := func(ctx context.Context) error {
		if err := t.exec(ctx, "ROLLBACK TO SAVEPOINT backstop_enqueue"); err != nil {
			return err
		}
		return t.exec(ctx, "RELEASE SAVEPOINT backstop_enqueue")
	}
	return release, rollback, nil
}

// commit sends the wake-up and COMMIT in one round trip. A transaction
// the server ended as a rollback (an earlier failure) is an error.
func (t *pipeTx) commit(ctx context.Context) error {
	if t.done { // committed with its COPY
		return nil
	}
	if !t.begun {
		t.done = true
		return nil
	}
	t.willCommit(t.woken)
	b := &pgx.Batch{}
	if len(t.woken) > 0 {
		b.Queue(sqlNotifyQueues, t.woken)
	}
	b.Queue("commit")
	br := t.conn.SendBatch(ctx, b)
	var err error
	if len(t.woken) > 0 {
		if _, err = br.Exec(); err != nil {
			return errors.Join(fmt.Errorf("notify: %w", err), br.Close())
		}
	}
	tag, err := br.Exec()
	if err = errors.Join(err, br.Close()); err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	t.done = true
	return nil
}

// rollback ends a transaction that was begun and not committed; it is a
// no-op otherwise.
func (t *pipeTx) rollback(ctx context.Context) {
	if t.begun && !t.done {
		t.done = true
		_, _ = t.conn.Exec(ctx, "rollback")
	}
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
