package cli

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// A command whose PostgreSQL connection is terminated while it writes
// exits 1 naming the cause and saying it is temporary.
func TestLostConnectionExitsOneNamingTheCause(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.Postgres(t)}
	e.ok("migrate")
	killed := testdb.TerminateWaiters(t, e.db, "backstop_tasks", 1)
	r := e.run("", "enqueue", "--queue", "q", "--kind", "k", "--payload", "{}")
	if n := <-killed; n != 1 {
		t.Fatalf("terminated %d backends, want 1 (enqueue: exit %d, stderr %q)", n, r.code, r.stderr)
	}
	if r.code != ExitFailure || !strings.Contains(r.stderr, "store unavailable (shutting down)") || !strings.Contains(r.stderr, "temporary") {
		t.Fatalf("enqueue on a lost connection: exit %d, stderr %q", r.code, r.stderr)
	}
}

// Over --server, a server whose SQLite database another process holds
// locked answers 503: the command exits 1 naming the cause.
func TestServerUnavailableExitsOneNamingTheCause(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	e.ok("migrate")
	path := strings.TrimPrefix(e.db, "sqlite://")
	s, err := sqlitestore.OpenOptions(path, sqlitestore.Options{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	url := apiServerOn(t, s, &backstop.Config{}, api.Options{AnonymousAdmin: true})
	db, err := sql.Open(sqlitestore.DriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	r := e.run("", "--server", url, "enqueue", "--queue", "q", "--kind", "k", "--payload", "{}")
	if r.code != ExitFailure || !strings.Contains(r.stderr, "unavailable (busy)") || !strings.Contains(r.stderr, "temporary") {
		t.Fatalf("enqueue over a busy server: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	e.ok("--server", url, "enqueue", "--queue", "q", "--kind", "k", "--payload", "{}")
}
