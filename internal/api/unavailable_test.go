package api_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// mustUnavailable requires a 503 unavailable problem naming cause, with a
// Retry-After.
func mustUnavailable(t *testing.T, err error, cause string) {
	t.Helper()
	var p *api.Problem
	if !errors.As(err, &p) || p.Status != http.StatusServiceUnavailable || p.Code != "unavailable" ||
		!strings.Contains(p.Detail, cause) || p.RetryAfter <= 0 {
		t.Fatalf("want 503 unavailable (%s) with Retry-After, got %#v (%v)", cause, p, err)
	}
}

func readyz(t *testing.T, b *bundle) (int, api.Readiness) {
	t.Helper()
	code, body := b.raw(t, api.RoleNone, "GET", "/readyz", "", "")
	var rd api.Readiness
	if err := json.Unmarshal(body, &rd); err != nil {
		t.Fatalf("readyz: %s: %v", body, err)
	}
	return code, rd
}

// sqliteBusySetup is a server whose SQLite store waits 50ms for a write
// lock, and a plain connection to the same file.
func sqliteBusySetup(t *testing.T) (*bundle, *sql.Conn) {
	t.Helper()
	url := testdb.SQLite(t)
	path := strings.TrimPrefix(url, "sqlite://")
	b := setup(t, url, setupOpts{rateLimit: -1, wrap: func(migrated store.Store) store.Store {
		migrated.Close() // setup closes the store this returns
		s, err := sqlitestore.OpenOptions(path, sqlitestore.Options{BusyTimeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
	db, err := sql.Open(sqlitestore.DriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return b, conn
}

// Another process holding SQLite's write lock past the busy timeout:
// a write answers 503 unavailable (busy) with Retry-After, /readyz fails
// naming the cause; once the lock is let go both work again.
func TestSQLiteBusyIsUnavailable(t *testing.T) {
	t.Parallel()
	b, other := sqliteBusySetup(t)
	ctx := context.Background()
	op := b.as[api.RoleOperator]
	if code, rd := readyz(t, b); code != 200 || !rd.Ready || rd.Store != "ok" {
		t.Fatalf("readyz before: %d %+v", code, rd)
	}
	if _, err := other.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	_, err := op.Enqueue(ctx, apiclient.Task{Queue: "q", Kind: "k", Payload: json.RawMessage(`{}`)})
	mustUnavailable(t, err, "busy")
	if code, rd := readyz(t, b); code != 503 || rd.Ready || rd.Store != "unavailable" || rd.Cause != store.CauseBusy {
		t.Fatalf("readyz while locked: %d %+v", code, rd)
	}
	if _, err := other.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "q", Kind: "k", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if code, rd := readyz(t, b); code != 200 || !rd.Ready {
		t.Fatalf("readyz after: %d %+v", code, rd)
	}
}

// A full SQLite database (max_page_count at its current size, a real
// file that cannot grow): /readyz fails with cause "disk full" (its
// probe needs pages, as an enqueue does) and an enqueue answers 503.
func TestSQLiteFullDiskIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.SQLite(t), setupOpts{rateLimit: -1})
	ctx := context.Background()
	db := b.store.(*sqlitestore.Store).DB() // the writer: one connection, the pragma stays on it
	var pages int
	if err := db.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "PRAGMA max_page_count = "+strconv.Itoa(pages)); err != nil {
		t.Fatal(err)
	}
	if code, rd := readyz(t, b); code != 503 || rd.Ready || rd.Store != "unavailable" || rd.Cause != store.CauseDiskFull {
		t.Fatalf("readyz on a full database: %d %+v", code, rd)
	}
	big := json.RawMessage(`{"s":"` + strings.Repeat("x", 64<<10) + `"}`)
	_, err := b.as[api.RoleOperator].Enqueue(ctx, apiclient.Task{Queue: "q", Kind: "k", Payload: big})
	mustUnavailable(t, err, "disk full")
	if _, err := db.ExecContext(ctx, "PRAGMA max_page_count = 1073741823"); err != nil {
		t.Fatal(err)
	}
	if code, rd := readyz(t, b); code != 200 || !rd.Ready {
		t.Fatalf("readyz after: %d %+v", code, rd)
	}
}

// A request whose PostgreSQL connection is terminated while it runs
// answers 503 unavailable with Retry-After, not 500.
func TestPostgresLostConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	url := testdb.Postgres(t)
	b := setup(t, url, setupOpts{rateLimit: -1})
	ctx := context.Background()
	killed := testdb.TerminateWaiters(t, url, "backstop_tasks", 1)
	_, err := b.as[api.RoleOperator].Enqueue(ctx, apiclient.Task{Queue: "q", Kind: "k", Payload: json.RawMessage(`{}`)})
	if n := <-killed; n != 1 {
		t.Fatalf("terminated %d backends, want 1", n)
	}
	mustUnavailable(t, err, "shutting down")
	if _, err := b.as[api.RoleOperator].Enqueue(ctx, apiclient.Task{Queue: "q", Kind: "k", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

// A redrive whose PostgreSQL connection is terminated mid-batch waits
// the outage out and finishes done, each dead letter replayed once.
func TestPostgresRedriveSurvivesLostConnection(t *testing.T) {
	t.Parallel()
	url := testdb.Postgres(t)
	b := setup(t, url, setupOpts{rateLimit: -1, lib: &backstop.Config{StoreRetry: 30 * time.Second}})
	ctx := context.Background()
	for range 6 {
		kill(t, b, apiclient.Task{Queue: "rq", Kind: "k", Payload: json.RawMessage(`{}`)})
	}
	killed := testdb.TerminateWaiters(t, url, "backstop_tasks", 1)
	st, err := b.as[api.RoleAdmin].Redrive(ctx, api.RedriveRequest{Queue: "rq", Wait: 0})
	if err != nil {
		t.Fatal(err)
	}
	if n := <-killed; n != 1 {
		t.Fatalf("terminated %d backends, want 1", n)
	}
	testwait.For(t, "the redrive to end", func() bool {
		if st, err = b.as[api.RoleViewer].RedriveStatus(ctx, st.RedriveID); err != nil {
			t.Fatal(err)
		}
		return st.Status != "running"
	})
	if st.Status != "done" || st.Replayed != 6 || st.Failed != 0 || st.Outcomes["replayed"] != 6 {
		t.Fatalf("redrive after a lost connection: %+v", st)
	}
}

// A bulk close whose PostgreSQL connection is terminated mid-batch waits
// the outage out: every matching dead letter is closed, once.
func TestPostgresCloseSurvivesLostConnection(t *testing.T) {
	t.Parallel()
	url := testdb.Postgres(t)
	b := setup(t, url, setupOpts{rateLimit: -1, lib: &backstop.Config{StoreRetry: 30 * time.Second}})
	ctx := context.Background()
	for range 4 {
		kill(t, b, apiclient.Task{Queue: "cq", Kind: "k", Payload: json.RawMessage(`{}`)})
	}
	killed := testdb.TerminateWaiters(t, url, "backstop_tasks", 1)
	res, err := b.as[api.RoleAdmin].CloseDLQ(ctx, api.CloseRequest{Queue: "cq", Status: "discarded", Why: "outage test"})
	if n := <-killed; n != 1 {
		t.Fatalf("terminated %d backends, want 1", n)
	}
	if err != nil || res.Closed != 4 || res.Skipped != 0 || res.More { // the terminated write never ran
		t.Fatalf("close after a lost connection: %+v %v", res, err)
	}
	open, err := b.lib.DeadLetters(ctx, backstop.ListParams{Queue: "cq", DLQStatuses: []backstop.DLQStatus{backstop.DLQOpen}})
	if err != nil || len(open) != 0 {
		t.Fatalf("still open: %d %v", len(open), err)
	}
}
