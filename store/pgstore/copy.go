package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/store"
)

// A batch of tasks without keys is written by COPY when the transaction is
// pgx's and the batch is larger than a prepared INSERT's (maxPreparedRows):
// a multi-row INSERT of a thousand tasks is a statement of 24,000
// parameters that the server parses and plans on every batch, which cost
// far more than writing the rows (docs/benchmarks.md, "Batch enqueue by
// COPY"). Its task.enqueued row is written first (sqlCopiedEvents), so
// that the copied rows can list its number in event_links; the events and
// the rows are the INSERT's, read back alike.
//
// COPY has no ON CONFLICT: a task id that exists, or is twice in the
// batch, fails the COPY and with it the transaction (or the savepoint).
// The caller then runs the whole enqueue again with INSERTs
// (errCopyConflict), which report the id as they always have, so a
// conflict costs a second attempt and nothing else changes.

// errCopyConflict is a COPY that met a task id already taken. The
// transaction (or savepoint) it ran in is aborted.
var errCopyConflict = errors.New("pgstore: enqueue: a copied task id is taken")

// copyColumns are the columns a COPY writes: insertColumns, then
// event_links.
var copyColumns = append(append([]string(nil), insertColumns...), "event_links")

// worthCopying says whether tasks hold a batch enqueue writes by COPY.
func worthCopying(plain int) bool { return plain > maxPreparedRows }

// copyTasks writes batch by COPY with its task.enqueued event; ok is false
// when the transaction cannot COPY (database/sql), and nothing was written.
func copyTasks(ctx context.Context, db dbtx, batch []row, actor string) (ok bool, err error) {
	cp, ok := db.(copier)
	if !ok {
		return false, nil
	}
	n := len(batch)
	ids, queues, kinds, states := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	runAts, createdAts := make([]time.Time, n), make([]time.Time, n)
	prios, maxAtts := make([]int32, n), make([]int32, n)
	attrs := make([]*string, n)
	for i, r := range batch {
		t := r.task
		ids[i], queues[i], kinds[i], states[i] = t.ID, t.Queue, t.Kind, string(t.State)
		runAts[i], createdAts[i] = t.RunAt, t.CreatedAt
		prios[i], maxAtts[i] = int32(t.Priority), int32(t.MaxAttempts)
		if r.attributes != nil {
			a := string(r.attributes)
			attrs[i] = &a
		}
	}
	var seq int64
	if err := cp.queryRow(ctx, sqlCopiedEvents, ids, queues, kinds, states, runAts, prios, maxAtts, attrs, createdAts, actor).Scan(&seq); err != nil {
		return false, fmt.Errorf("pgstore: enqueue: events: %w", err)
	}
	links := []int64{seq}
	rows := make([][]any, n)
	for i, r := range batch {
		rows[i] = append(r.args(make([]any, 0, len(copyColumns))), links)
	}
	if err := cp.copyFrom(ctx, "backstop_tasks", copyColumns, rows); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "backstop_tasks_pkey" {
			return false, fmt.Errorf("%w: %s", errCopyConflict, pe.Detail)
		}
		return false, fmt.Errorf("pgstore: enqueue: copy: %w", err)
	}
	return true, nil
}

// copier is a transaction that can COPY: pgx's.
type copier interface {
	queryRow(ctx context.Context, sql string, args ...any) pgx.Row
	copyFrom(ctx context.Context, table string, cols []string, rows [][]any) error
}

func (t pgxTx) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.tx.QueryRow(ctx, sql, args...)
}

func (t pgxTx) copyFrom(ctx context.Context, table string, cols []string, rows [][]any) error {
	_, err := t.tx.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows))
	return err
}

// enqueueCopying runs body, and when its COPY met a taken id, runs it
// again without COPY: the INSERTs report the id. body runs in a
// transaction or savepoint of its own each time.
func enqueueCopying(body func(copyOK bool) ([]store.EnqueueResult, error)) ([]store.EnqueueResult, error) {
	res, err := body(true)
	if errors.Is(err, errCopyConflict) {
		return body(false)
	}
	return res, err
}
