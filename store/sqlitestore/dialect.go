package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// This file adapts database/sql to store/internal/sqldialect, which holds
// the cold procedures both drivers share (tokens, workers, …). The hot
// paths stay in this package.

// procedures are the shared procedures, embedded in Store: their methods
// are Store's (the alias keeps the embedded field unexported).
type procedures = sqldialect.Procedures

// dialect is what SQLite's SQL says differently from PostgreSQL's.
var dialect = &sqldialect.Dialect{
	Driver:      "sqlite",
	Prefix:      "sqlite",
	ForUpdate:   "", // the writer's transactions begin IMMEDIATE
	Strpos:      "instr",
	OctetLength: func(expr string) string { return "length(CAST(" + expr + " AS BLOB))" },
	InText:      func(p string) string { return "IN (SELECT value FROM json_each(" + p + "))" },
	JSONText:    func(col, p string) string { return "json_extract(" + col + ", " + p + ")" },
	JSONKey:     func(key string) any { return `$."` + key + `"` },
	TextList: func(list []string) any {
		b, _ := json.Marshal(list)
		return string(b)
	},
	IsUnique:   isUnique,
	Err:        func(err error) error { return err },
	IndexValid: `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = $1`,
	IndexedBy:  func(name string) string { return " INDEXED BY " + name },
	WorkerEvents: func(ctx context.Context, tx sqldialect.Tx, events []bt.Event) error {
		return insertEventsIndexed(ctx, sqlOf(tx), events, false) // events_write.go
	},
	TaskEvents: func(ctx context.Context, tx sqldialect.Tx, events []bt.Event) error {
		if len(events) == 0 {
			return nil
		}
		return insertEvents(ctx, sqlOf(tx), events)
	},
	GetTask: func(ctx context.Context, tx sqldialect.Tx, id string, _ bool) (*bt.Task, error) {
		return getTask(ctx, sqlOf(tx), id) // the writer's lock is the row lock
	},
	SetPayload: func(ctx context.Context, tx sqldialect.Tx, id string, payload json.RawMessage, limit int) error {
		return setPayload(ctx, sqlOf(tx), id, payload, limit) // dlq.go
	},
	ReplayOrdering: func(ctx context.Context, tx sqldialect.Tx, ids []string) error {
		list := make([]any, len(ids))
		for i, id := range ids {
			list[i] = id
		}
		return replayOrdering(ctx, sqlOf(tx), list)
	},
	TableSizes: tableSizes, // ops.go
	PurgeBatch: purgeBatch, // dlq.go
	DuplicateTaskID: func(ctx context.Context, tx sqldialect.Tx, _ error, id string) bool {
		// A failed statement leaves SQLite's transaction usable: look.
		var one int
		return sqlOf(tx).QueryRowContext(ctx, `SELECT 1 FROM backstop_tasks WHERE id = ?`, id).Scan(&one) == nil
	},
}

// sqlOf is the database/sql transaction under a transaction this file began.
func sqlOf(tx sqldialect.Tx) *sql.Tx { return tx.(*runnerTx).tx }

// writer is the single writer connection as a sqldialect.DB.
func (s *Store) writer() runner { return runner{s.w, s.w, s.hub} }

// reader is the reading pool (it begins no transactions).
func (s *Store) reader() runner { return runner{q: s.r} }

type runner struct {
	q   querier
	db  *sql.DB
	hub *hub // wakes workers after a commit
}

func (r runner) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := r.q.ExecContext(ctx, sqldialect.Rebind(query), encodeArgs(args)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (r runner) Query(ctx context.Context, query string, args ...any) (sqldialect.Rows, error) {
	rs, err := r.q.QueryContext(ctx, sqldialect.Rebind(query), encodeArgs(args)...)
	if err != nil {
		return nil, err
	}
	return runnerRows{rs}, nil
}

func (r runner) QueryRow(ctx context.Context, query string, args ...any) sqldialect.Row {
	return runnerRow{r.q.QueryRowContext(ctx, sqldialect.Rebind(query), encodeArgs(args)...)}
}

func (r runner) Begin(ctx context.Context) (sqldialect.Tx, error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &runnerTx{runner: runner{q: tx}, tx: tx, hub: r.hub}, nil
}

type runnerTx struct {
	runner
	tx   *sql.Tx
	hub  *hub
	wake map[string]struct{} // queues to wake after commit
}

func (t *runnerTx) Commit(context.Context) error {
	if err := t.tx.Commit(); err != nil {
		return err
	}
	t.hub.notify(t.wake)
	return nil
}

func (t *runnerTx) Rollback(context.Context) error { return t.tx.Rollback() }

// Wake wakes the queue's workers in this process after commit (other
// processes notice the commit: Wakeups).
func (t *runnerTx) Wake(_ context.Context, queue string) error {
	if t.wake == nil {
		t.wake = map[string]struct{}{}
	}
	t.wake[queue] = struct{}{}
	return nil
}

type runnerRows struct{ *sql.Rows }

func (r runnerRows) Scan(dest ...any) error { return r.Rows.Scan(decodeDest(dest)...) }
func (r runnerRows) Close()                 { _ = r.Rows.Close() }

type runnerRow struct{ row *sql.Row }

func (r runnerRow) Scan(dest ...any) error {
	err := r.row.Scan(decodeDest(dest)...)
	if errors.Is(err, sql.ErrNoRows) {
		return sqldialect.NoRows(err)
	}
	return err
}

// encodeArgs stores times as INTEGER microseconds (in a copy: the
// caller's slice is left as it was).
func encodeArgs(args []any) []any {
	out, copied := args, false
	for i, a := range args {
		var v any
		switch t := a.(type) {
		case time.Time:
			v = us(t)
		case *time.Time:
			v = usPtr(t)
		default:
			continue
		}
		if !copied {
			out, copied = append([]any(nil), args...), true
		}
		out[i] = v
	}
	return out
}

// decodeDest reads INTEGER microseconds into times.
func decodeDest(dest []any) []any {
	out, copied := dest, false
	for i, d := range dest {
		var sc sql.Scanner
		switch p := d.(type) {
		case *time.Time:
			sc = timeCol{p}
		case **time.Time:
			sc = nullTimeCol{p}
		default:
			continue
		}
		if !copied {
			out, copied = append([]any(nil), dest...), true
		}
		out[i] = sc
	}
	return out
}

// timeCol scans INTEGER microseconds into a time.
type timeCol struct{ p *time.Time }

func (c timeCol) Scan(v any) error {
	n, err := scanInt(v)
	*c.p = fromUS(n)
	return err
}

// nullTimeCol scans INTEGER microseconds or NULL into a *time.Time.
type nullTimeCol struct{ p **time.Time }

func (c nullTimeCol) Scan(v any) error {
	if v == nil {
		*c.p = nil
		return nil
	}
	n, err := scanInt(v)
	t := fromUS(n)
	*c.p = &t
	return err
}
