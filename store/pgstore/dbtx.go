package pgstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// dbtx is the little enqueue needs from a transaction, so that its SQL is
// written once for pgx and for database/sql.
type dbtx interface {
	exec(ctx context.Context, sql string, args ...any) error
	query(ctx context.Context, sql string, args ...any) (rows, error)
	// savepoint starts a nested unit that release keeps and rollback undoes.
	savepoint(ctx context.Context) (release, rollback func(context.Context) error, err error)
	// batchArgs marks the arguments of a statement whose text varies with
	// the batch size, so that it is not kept as a prepared statement: one
	// for a thousand rows costs the server megabytes, and pgx would keep
	// hundreds of them per connection.
	batchArgs(rows int, args []any) []any
}

// maxPreparedRows is the largest batch statement kept prepared.
const maxPreparedRows = 8

type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// asDBTx adapts a caller's transaction.
func asDBTx(tx any) (dbtx, error) {
	switch tx := tx.(type) {
	case pgx.Tx:
		return pgxTx{tx}, nil
	case *sql.Tx:
		return sqlTx{tx}, nil
	case nil:
		return nil, fmt.Errorf("pgstore: EnqueueTx needs a transaction, got nil")
	default:
		return nil, fmt.Errorf("pgstore: EnqueueTx needs a pgx.Tx or a *sql.Tx, got %T", tx)
	}
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.Exec(ctx, sql, args...)
	return err
}

func (t pgxTx) query(ctx context.Context, sql string, args ...any) (rows, error) {
	return t.tx.Query(ctx, sql, args...)
}

func (t pgxTx) batchArgs(rows int, args []any) []any {
	if rows <= maxPreparedRows {
		return args
	}
	return append([]any{pgx.QueryExecModeDescribeExec}, args...)
}

func (t pgxTx) savepoint(ctx context.Context) (func(context.Context) error, func(context.Context) error, error) {
	// Begin on a pgx.Tx is a savepoint.
	sp, err := t.tx.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	return sp.Commit, sp.Rollback, nil
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, sql, args...)
	return err
}

func (t sqlTx) query(ctx context.Context, sql string, args ...any) (rows, error) {
	r, err := t.tx.QueryContext(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

// batchArgs leaves statement caching to the caller's driver settings: a
// pgx QueryExecMode would break other database/sql drivers.
func (t sqlTx) batchArgs(_ int, args []any) []any { return args }

func (t sqlTx) savepoint(ctx context.Context) (func(context.Context) error, func(context.Context) error, error) {
	if _, err := t.tx.ExecContext(ctx, "SAVEPOINT backstop_enqueue"); err != nil {
		return nil, nil, err
	}
	release := func(ctx context.Context) error {
		_, err := t.tx.ExecContext(ctx, "RELEASE SAVEPOINT backstop_enqueue")
		return err
	}
	rollback := func(ctx context.Context) error {
		_, err := t.tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT backstop_enqueue")
		if err == nil {
			_, err = t.tx.ExecContext(ctx, "RELEASE SAVEPOINT backstop_enqueue")
		}
		return err
	}
	return release, rollback, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }
