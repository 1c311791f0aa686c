// Package pgstore is Backstop's PostgreSQL store: the store.Store that lets
// any number of processes on any number of hosts share one database. Workers
// claim with FOR UPDATE SKIP LOCKED, new work wakes them through
// LISTEN/NOTIFY, and the Go library enqueues inside the caller's own pgx or
// database/sql transaction (the transactional outbox).
//
// It applies the engine's decisions and never makes them: it must never
// decide retry delays, dead-letter reasons or validity, never commit or roll
// back a caller's transaction, never change session state (SET, LISTEN) on a
// pooled connection, and never leave a goroutine running after its context
// ends or Close returns. Every write is one transaction (EnqueueTx: one
// savepoint in the caller's; Txs and InTx: part of a transaction the engine
// or the caller composes, tx.go).
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// wakeupChannel is the NOTIFY channel; the payload is the queue name.
const wakeupChannel = "backstop_wakeup"

// Store is a store.Store on PostgreSQL.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool

	// The cold procedures (tokens, the worker registry, leadership,
	// dead-letter replay, …), written once for both drivers: dialect.go.
	*procedures

	// finishedCounted: how many of the newest finished tasks
	// the gauges count (FinishedCounted; tests lower it).
	finishedCounted int

	// limitBinding: queue -> the claim time at which an optimistic limited
	// claim last overran a limit (limits.go).
	limitBinding sync.Map

	// schemaAt: 0, or the older schema version a test left the store at
	// (MigrateTo, MigrateDownTo), whose forms of the hot statements it
	// runs (forms.go); Migrate sets it back to 0.
	schemaAt atomic.Int64

	// cursors: queue and claim shape -> *claimCursor, where the claims of
	// this process last ended (cursor.go); cursorPeriod: how long one is
	// trusted between full picks (tests lower it).
	cursors      sync.Map
	cursorPeriod time.Duration
	// claimPlans: when each connection prepared its claim statements
	// (weak.Pointer[pgx.Conn] → *connPlans); claimPlanPeriod: how long
	// one is kept (cursor.go, freshPlan; tests lower it).
	claimPlans      sync.Map
	claimPlanPeriod time.Duration

	// done ends the Wakeups listeners on Close; wg waits for them.
	done   context.Context
	stop   context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	// local: the open Wakeups channels, which Enqueue wakes in-process,
	// each with the notifications it got so (wakeup.go); guarded by mu.
	local map[chan string]map[localWake]int
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at url (postgres://…; pgxpool parameters
// such as pool_max_conns are honoured). The pool belongs to the Store and is
// closed by Close. Open does not migrate.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse database url: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgxpool's default (the CPU count, at least 4) starves a process
		// whose workers claim, heartbeat and settle concurrently.
		cfg.MaxConns = int32(max(10, 4*runtime.NumCPU()))
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["jit"]; !ok {
		// JIT compiling pays off for long analytic queries, not for the
		// store's: a where's list (its per-row expressions estimated
		// dear) crossed jit_above_cost and spent 110 ms compiling to read
		// two rows through an index. A URL's jit=on brings it back.
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, connectError(cfg, err)
	}
	s := New(pool)
	s.ownPool = true
	return s, nil
}

// New wraps a pool the caller owns: Close stops the Store's listeners but
// leaves the pool open.
func New(pool *pgxpool.Pool) *Store {
	done, stop := context.WithCancel(context.Background())
	s := &Store{pool: pool, done: done, stop: stop, finishedCounted: FinishedCounted, cursorPeriod: defaultCursorPeriod, claimPlanPeriod: claimPlanPeriod}
	s.procedures = sqldialect.New(dialect, s.runner(), s.runner())
	return s
}

// Pool is the connection pool the Store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Driver implements store.Store.
func (s *Store) Driver() string { return "postgres" }

// Close stops the Wakeups listeners, waits for them, and closes the pool if
// Open created it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.stop()
	s.mu.Unlock()
	s.wg.Wait()
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

// connectError says why the first connection failed. Without sslmode in
// the URL pgx tries TLS, then plaintext, and its error lists both attempts,
// the TLS refusal first: when a server answered (a database that does not
// exist, a password refused), its answer is the real cause and is what the
// message says. The original error stays wrapped.
func connectError(cfg *pgxpool.Config, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		cc := cfg.ConnConfig
		return &serverRefused{err: err, msg: fmt.Sprintf("pgstore: connect to %s:%d as %q: %s (SQLSTATE %s)",
			cc.Host, cc.Port, cc.User, pgErr.Message, pgErr.Code)}
	}
	return fmt.Errorf("pgstore: connect: %w", err)
}

type serverRefused struct {
	err error
	msg string
}

func (e *serverRefused) Error() string { return e.msg }
func (e *serverRefused) Unwrap() error { return e.err }
