// Package sqlitestore is Backstop's embedded store: one SQLite file in WAL
// mode, safe for several processes on one host.
//
// In one process all writes go through a single connection (SQLite has one
// writer anyway), so goroutines queue in Go instead of spinning on
// SQLITE_BUSY; other processes are serialised by BEGIN IMMEDIATE and the busy
// timeout. Reads use a separate pool. Like every driver it applies the
// engine's decisions and never makes policy of its own.
package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Store is the SQLite implementation of store.Store.
type Store struct {
	path string
	w    *sql.DB // one connection: the writer
	r    *sql.DB // readers
	hub  *hub

	// The cold procedures (tokens, the worker registry, leadership,
	// dead-letter replay, …), written once for both drivers: dialect.go.
	*procedures

	// limitBinding: queue -> the claim time at which an optimistic limited
	// claim last overran a limit (limits.go).
	limitBinding sync.Map

	// countsPerRow: the file's schema predates migration 00050, so its
	// update trigger counts every claim and success itself and moveCounts
	// must not (counts.go). Only a test opens a file at an older version
	// (storeAt); Migrate clears it.
	countsPerRow atomic.Bool

	// replayPerRow: the file's schema predates migration 00054, so its
	// update triggers count every replayed row and a redrive batch must
	// not count its own (dlq.go: redriveCounted). Only a test opens such a
	// file (storeAt); Migrate clears it.
	replayPerRow atomic.Bool
}

var _ store.Store = (*Store)(nil)

// Options tune a Store; the zero value is the default.
type Options struct {
	// BusyTimeout: how long a statement waits for another process's write
	// lock before it fails with SQLITE_BUSY (store.ErrUnavailable, cause
	// busy). Default 10s.
	BusyTimeout time.Duration
}

// Open opens (creating if needed) the SQLite database at path with the
// default Options. It does not migrate; call Migrate.
func Open(path string) (*Store, error) { return OpenOptions(path, Options{}) }

// OpenOptions is Open with Options.
func OpenOptions(path string, o Options) (*Store, error) {
	busy := o.BusyTimeout
	if busy <= 0 {
		busy = 10 * time.Second
	}
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	w, err := sql.Open(DriverName, dsn(abs, true, busy))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := w.Ping(); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	if err := setCheckpoint(context.Background(), w); err != nil { // pragmas.go
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	r, err := sql.Open(DriverName, dsn(abs, false, busy))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	s := &Store{path: abs, w: w, r: r, hub: hubFor(abs)}
	s.procedures = sqldialect.New(dialect, s.writer(), s.reader())
	return s, nil
}

// DB is the writer handle. Begin a transaction on it to enqueue together with
// your own changes (EnqueueTx); do not hold it longer than needed, it is the
// only writer of this process.
func (s *Store) DB() *sql.DB { return s.w }

// Path is the absolute path of the database file.
func (s *Store) Path() string { return s.path }

func (s *Store) Driver() string { return "sqlite" }

// Features implements store.Store: one writer at a time.
func (s *Store) Features() store.Features { return store.Features{SettleParallelism: 1} }

func (s *Store) Close() error {
	return errors.Join(s.r.Close(), s.w.Close())
}

func (s *Store) provider() (*goose.Provider, error) {
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectSQLite3, s.w, sub,
		goose.WithTableName("backstop_schema_version"),
		goose.WithDisableGlobalRegistry(true))
}

// CheckSchema refuses (*store.SchemaTooNewError) a database whose schema
// version is ahead of this binary's migrations. A database without the
// version table (new, empty) passes.
func (s *Store) CheckSchema(ctx context.Context) error {
	bin, err := store.MaxMigrationVersion(migrationFS, "migrations")
	if err != nil {
		return fmt.Errorf("sqlite: migrations: %w", err)
	}
	var n int
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'backstop_schema_version'`).Scan(&n); err != nil {
		return fmt.Errorf("sqlite: schema version: %w", err)
	}
	if n == 0 {
		return nil
	}
	var db sql.NullInt64
	if err := s.w.QueryRowContext(ctx, `SELECT max(version_id) FROM backstop_schema_version`).Scan(&db); err != nil {
		return fmt.Errorf("sqlite: schema version: %w", err)
	}
	return store.CheckSchemaVersion("sqlite", db.Int64, bin)
}

// Migrate applies every pending migration; a database newer than this
// binary is refused (*store.SchemaTooNewError) and left alone.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.CheckSchema(ctx); err != nil {
		return err
	}
	p, err := s.provider()
	if err != nil {
		return fmt.Errorf("sqlite: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	s.countsPerRow.Store(false)
	s.replayPerRow.Store(false)
	return nil
}

func (s *Store) MigrationStatus(ctx context.Context) ([]store.Migration, error) {
	p, err := s.provider()
	if err != nil {
		return nil, fmt.Errorf("sqlite: migrations: %w", err)
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: migration status: %w", err)
	}
	out := make([]store.Migration, 0, len(st))
	for _, m := range st {
		mg := store.Migration{Version: m.Source.Version, Name: filepath.Base(m.Source.Path)}
		if m.State == goose.StateApplied {
			t := m.AppliedAt.UTC()
			mg.AppliedAt = &t
		}
		out = append(out, mg)
	}
	return out, nil
}

// hub delivers in-process wake-ups to every Store open on the same file.
type hub struct {
	mu   sync.Mutex
	subs map[chan string]struct{}
}

var (
	hubsMu sync.Mutex
	hubs   = map[string]*hub{}
)

func hubFor(path string) *hub {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	h := hubs[path]
	if h == nil {
		h = &hub{subs: map[chan string]struct{}{}}
		hubs[path] = h
	}
	return h
}

func (h *hub) notify(queues map[string]struct{}) {
	if len(queues) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		for q := range queues {
			select {
			case ch <- q:
			default: // full: the subscriber has wake-ups pending already
			}
		}
	}
}

// CrossProcessPoll is how often Wakeups checks whether another process
// committed to the database file (PRAGMA data_version), to wake workers of
// this process without waiting for their poll interval.
var CrossProcessPoll = 50 * time.Millisecond

// Wakeups delivers in-process wake-ups at once, and an "any queue" wake-up
// ("") when another connection — another process on the same file —
// committed since the last check.
func (s *Store) Wakeups(ctx context.Context) <-chan string {
	ch := make(chan string, 64)
	s.hub.mu.Lock()
	s.hub.subs[ch] = struct{}{}
	s.hub.mu.Unlock()
	out := make(chan string, 64)
	send := func(q string) {
		select {
		case out <- q:
		default:
		}
	}
	// data_version is per connection: pin one, and read the starting value
	// before returning so no commit after this call goes unnoticed.
	var (
		last   int64
		ticker *time.Ticker
		tick   <-chan time.Time
	)
	conn, err := s.r.Conn(ctx)
	if err == nil {
		if conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&last) == nil {
			ticker = time.NewTicker(CrossProcessPoll)
			tick = ticker.C
		}
	}
	go func() {
		defer close(out)
		defer func() {
			s.hub.mu.Lock()
			delete(s.hub.subs, ch)
			s.hub.mu.Unlock()
		}()
		if conn != nil {
			defer conn.Close()
		}
		if ticker != nil {
			defer ticker.Stop()
		}
		for {
			select {
			case <-ctx.Done():
				return
			case q := <-ch:
				send(q)
			case <-tick:
				var v int64
				if err := conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err == nil && v != last {
					last = v
					send("")
				}
			}
		}
	}()
	return out
}

// Time encoding: INTEGER microseconds since the epoch.
func us(t time.Time) int64 { return t.UnixMicro() }

func usPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

func fromUS(v int64) time.Time { return time.UnixMicro(v).UTC() }

func fromNullUS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromUS(v.Int64)
	return &t
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}
