package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// This file adapts pgx to store/internal/sqldialect, which holds the cold
// procedures both drivers share (tokens, workers, …). The hot paths stay
// in this package.

// procedures are the shared procedures, embedded in Store: their methods
// are Store's (the alias keeps the embedded field unexported).
type procedures = sqldialect.Procedures

// dialect is what PostgreSQL's SQL says differently from SQLite's.
var dialect = &sqldialect.Dialect{
	Driver:      "postgres",
	Prefix:      "pgstore",
	ForUpdate:   " FOR UPDATE",
	Strpos:      "strpos",
	OctetLength: func(expr string) string { return "octet_length(" + expr + ")" },
	InText:      func(p string) string { return "= ANY(" + p + "::text[])" },
	JSONText:    func(col, p string) string { return "(" + col + " ->> " + p + "::text)" },
	JSONKey:     func(key string) any { return key },
	TextList:    func(list []string) any { return textArray(list) },
	IsUnique:    isUniqueViolation,
	Err:         permission,
	// A failed CREATE INDEX CONCURRENTLY leaves an index marked invalid.
	IndexConcurrently: "CONCURRENTLY ",
	IndexValid:        `SELECT count(*) FROM pg_index WHERE indexrelid = to_regclass($1::text) AND indisvalid`,
	Lateral:           true,
	// One redrive record per filter at a time, even when two start at once.
	LockRedrive: `SELECT pg_advisory_xact_lock(hashtext('backstop_redrive:' || $1))`,
	WorkerEvents: func(ctx context.Context, tx sqldialect.Tx, events []bt.Event) error {
		return insertEventsScalar(ctx, pgxTx{pgxOf(tx)}, events)
	},
	TaskEvents: func(ctx context.Context, tx sqldialect.Tx, events []bt.Event) error {
		return insertEvents(ctx, pgxOf(tx), events) // dlq.go
	},
	GetTask: func(ctx context.Context, tx sqldialect.Tx, id string, lock bool) (*bt.Task, error) {
		if lock {
			return getTx(ctx, pgxOf(tx), sqlGetTask+" FOR UPDATE OF t", id)
		}
		return getTx(ctx, pgxOf(tx), sqlGetTask, id)
	},
	SetPayload: func(ctx context.Context, tx sqldialect.Tx, id string, payload json.RawMessage, limit int) error {
		return setPayload(ctx, pgxOf(tx), id, payload, limit)
	},
	ReplayOrdering: func(ctx context.Context, tx sqldialect.Tx, ids []string) error {
		return replayOrdering(ctx, pgxOf(tx), ids)
	},
	TableSizes: tableSizes, // ops.go
	PurgeBatch: purgeBatch, // dlq.go
	DuplicateTaskID: func(_ context.Context, _ sqldialect.Tx, err error, _ string) bool {
		// The transaction is aborted: the violated constraint says whose.
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.ConstraintName == "backstop_tasks_pkey"
	},
}

// pgxOf is the pgx transaction under a transaction this file began.
func pgxOf(tx sqldialect.Tx) pgx.Tx { return tx.(runnerTx).tx }

// pgxQuerier is what a pool and a transaction have in common.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// runner is the pool as a sqldialect.DB.
func (s *Store) runner() runner { return runner{s.pool, s.pool.Begin} }

type runner struct {
	q     pgxQuerier
	begin func(context.Context) (pgx.Tx, error)
}

func (r runner) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := r.q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (r runner) Query(ctx context.Context, sql string, args ...any) (sqldialect.Rows, error) {
	rs, err := r.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return runnerRows{rs}, nil
}

func (r runner) QueryRow(ctx context.Context, sql string, args ...any) sqldialect.Row {
	return runnerRow{r.q.QueryRow(ctx, sql, args...)}
}

func (r runner) Begin(ctx context.Context) (sqldialect.Tx, error) {
	tx, err := r.begin(ctx)
	if err != nil {
		return nil, err
	}
	return runnerTx{runner{q: tx}, tx}, nil
}

type runnerTx struct {
	runner
	tx pgx.Tx
}

func (t runnerTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t runnerTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// Wake notifies the queue's listeners; PostgreSQL delivers it on commit.
func (t runnerTx) Wake(ctx context.Context, queue string) error {
	_, err := t.tx.Exec(ctx, `SELECT pg_notify('`+wakeupChannel+`', $1)`, queue)
	return err
}

type runnerRows struct{ pgx.Rows }

func (r runnerRows) Scan(dest ...any) error {
	if err := r.Rows.Scan(dest...); err != nil {
		return err
	}
	utcTimes(dest)
	return nil
}

type runnerRow struct{ row pgx.Row }

func (r runnerRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sqldialect.NoRows(err)
	}
	if err != nil {
		return err
	}
	utcTimes(dest)
	return nil
}

// utcTimes puts the times scanned in UTC (pgx gives timestamptz in the
// local zone).
func utcTimes(dest []any) {
	for _, d := range dest {
		switch p := d.(type) {
		case *time.Time:
			*p = utc(*p)
		case **time.Time:
			*p = utcPtr(*p)
		}
	}
}
