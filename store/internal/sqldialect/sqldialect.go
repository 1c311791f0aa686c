// Package sqldialect writes the stores' cold procedures once: the
// operator's and the registry's multi-statement paths (tokens, workers,
// queues, logs, secrets, gauges, redrive records), whose SQL differs
// between PostgreSQL and SQLite only in placeholders, parameter types and
// a few functions. Each driver hands it an adapter over its own handles
// (pgx, database/sql) and a Dialect that names what differs.
//
// The tuned hot paths (enqueue, claim, settle, heartbeat, the events) stay
// in each driver and never come here. Like the drivers, it applies the
// engine's decisions and never makes policy of its own.
//
// The SQL here is written with PostgreSQL's numbered placeholders ($1,
// $2, a number may repeat); a SQLite adapter turns them into ?1, ?2
// (Rebind). Times are passed as time.Time and scanned into *time.Time or
// **time.Time (NULL): the adapter encodes them as the driver stores them
// (timestamptz; INTEGER microseconds) and hands them back in UTC.
package sqldialect

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Querier runs one statement: a pool or a connection, or a transaction.
type Querier interface {
	// Exec runs a statement and returns the rows it changed.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	// QueryRow's Scan returns an error matching ErrNoRows when there was
	// no row (and still matching the driver's own).
	QueryRow(ctx context.Context, sql string, args ...any) Row
}

// Rows is a result being read.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is a result of one row.
type Row interface {
	Scan(dest ...any) error
}

// DB begins transactions (the writer, on SQLite).
type DB interface {
	Querier
	Begin(ctx context.Context) (Tx, error)
}

// Tx is a transaction begun by DB.Begin.
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	// Wake wakes the workers of queue once the transaction commits (NOTIFY
	// on PostgreSQL; on SQLite the in-process hub after Commit).
	Wake(ctx context.Context, queue string) error
}

// ErrNoRows is what a Row's Scan matches when the query found nothing.
var ErrNoRows = errors.New("no rows in result set")

// NoRows wraps a driver's no-rows error so that it matches ErrNoRows too.
func NoRows(driverErr error) error { return noRows{driverErr} }

type noRows struct{ err error }

func (e noRows) Error() string        { return e.err.Error() }
func (e noRows) Unwrap() error        { return e.err }
func (e noRows) Is(target error) bool { return target == ErrNoRows }

// Dialect is what differs between the drivers in the cold procedures.
type Dialect struct {
	// Driver is store.Store's Driver ("postgres", "sqlite"); Prefix starts
	// the driver's error messages ("pgstore", "sqlite").
	Driver, Prefix string
	// ForUpdate ends a SELECT that locks its rows until commit: " FOR
	// UPDATE" on PostgreSQL, nothing on SQLite, whose writer's
	// transactions begin IMMEDIATE.
	ForUpdate string
	// Strpos is the function that finds a substring: strpos(s, sub) > 0 on
	// PostgreSQL, instr on SQLite.
	Strpos string
	// OctetLength is the length in bytes of a text expression.
	OctetLength func(expr string) string
	// InText is "IN the list in parameter p" for the value of TextList:
	// = ANY(p) with a text[] on PostgreSQL, IN (SELECT value FROM
	// json_each(p)) with a JSON array on SQLite.
	InText   func(p string) string
	TextList func(list []string) any
	// JSONText reads the text value of key (parameter p, the value of
	// JSONKey) in the JSON object column col: json_extract(col, p) with
	// the path $."key" on SQLite, col->>p on PostgreSQL.
	JSONText func(col, p string) string
	JSONKey  func(key string) any
	// IsUnique says whether err is a uniqueness violation.
	IsUnique func(err error) bool
	// Err marks a driver error with the store's sentinels where it has one
	// (PostgreSQL's insufficient_privilege: store.ErrPermissionDenied).
	Err func(err error) error
	// IndexConcurrently is what makes CREATE and DROP INDEX leave the
	// table's writes running ("CONCURRENTLY " on PostgreSQL, outside a
	// transaction); IndexValid counts the valid indexes named $1.
	IndexConcurrently, IndexValid string
	// IndexedBy, when set, is what follows a table alias to make a query
	// read the index named (SQLite's INDEXED BY: without statistics its
	// planner prefers the claim index to a fair queue's).
	IndexedBy func(name string) string
	// Lateral says the driver joins LATERAL subqueries (PostgreSQL).
	Lateral bool
	// LockRedrive, when set, takes a transaction lock on a redrive filter
	// key ($1), so that one record per filter is started even when two
	// start at once (SQLite's writer serialises them anyway).
	LockRedrive string

	// The driver's own procedures the shared ones call, in tx.

	// WorkerEvents writes a worker's events (not a task's history).
	WorkerEvents func(ctx context.Context, tx Tx, events []bt.Event) error
	// TaskEvents writes events of tasks (their history).
	TaskEvents func(ctx context.Context, tx Tx, events []bt.Event) error
	// GetTask reads a task with its payload; lock also locks its row until
	// commit. Unknown id: store.ErrNotFound.
	GetTask func(ctx context.Context, tx Tx, id string, lock bool) (*bt.Task, error)
	// SetPayload stores a task's new payload, inline or spilled past limit.
	SetPayload func(ctx context.Context, tx Tx, id string, payload json.RawMessage, limit int) error
	// ReplayOrdering puts replayed ordered tasks back in their key's line.
	ReplayOrdering func(ctx context.Context, tx Tx, ids []string) error
	// TableSizes lists the Backstop tables with their sizes in bytes (-1:
	// not known) and says the database's size.
	TableSizes func(ctx context.Context, q Querier) ([]store.TableSize, int64, error)
	// PurgeBatch deletes up to limit dead letters whose status is one of
	// statuses and whose record last changed before before, with their
	// executions, spilled payloads and events, in one transaction of db;
	// it returns how many tasks it deleted. ids, when not nil, narrows
	// them to those ids. event, when not nil, gives the event the batch
	// appends in its transaction when it deleted any.
	PurgeBatch func(ctx context.Context, db DB, statuses, ids []string, before time.Time, limit int, event func(int) bt.Event) (int, error)
	// DuplicateTaskID says whether err, a uniqueness violation of an
	// insert into backstop_tasks, is the id's (rather than a key's).
	DuplicateTaskID func(ctx context.Context, tx Tx, err error, id string) bool
}

// Procedures are the cold part of a store.Store, written once: a driver
// embeds them in its Store (through an unexported alias, so that they add
// methods and no exported field) and they implement store.Tokens, the
// worker registry, the leadership leases and the rest on its handles.
type Procedures struct {
	dialect *Dialect
	writer  DB       // writes and transactions
	reader  Querier  // reads (SQLite's reader pool; PostgreSQL's pool again)
	fairOne sync.Map // fairKey → *oneValueMark: a fair claim found one value waiting (FairOneValue)
	fairIdx sync.Map // index name → fairIndexSeen: whether a fair queue's index is there (fairIndexed)
}

// Interfaces the procedures implement whole; of the others (Workers,
// Queues, Logs, DLQ, Ops, and APIStore's DLQGroups, which reads through the
// driver's list filter) each driver adds the rest.
var (
	_ store.Tokens      = (*Procedures)(nil)
	_ store.Secrets     = (*Procedures)(nil)
	_ store.GaugeReader = (*Procedures)(nil)
)

// New returns the procedures of a store that writes through writer and
// reads through reader.
func New(d *Dialect, writer DB, reader Querier) *Procedures {
	return &Procedures{dialect: d, writer: writer, reader: reader}
}

// InTx runs f in a transaction of db, committed when f returns nil and
// rolled back otherwise.
func InTx(ctx context.Context, db DB, f func(tx Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// args numbers the parameters of a statement built piece by piece.
type args []any

// add appends v and returns its placeholder.
func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

var rebound sync.Map // PostgreSQL text → SQLite text

// Rebind turns $1, $2 … into ?1, ?2 … (SQLite's numbered parameters, which
// may repeat like PostgreSQL's). The SQL here has no $ in its literals.
func Rebind(sql string) string {
	if s, ok := rebound.Load(sql); ok {
		return s.(string)
	}
	var b strings.Builder
	b.Grow(len(sql))
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		if c == '$' && i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9' {
			c = '?'
		}
		b.WriteByte(c)
	}
	s := b.String()
	rebound.Store(sql, s)
	return s
}
