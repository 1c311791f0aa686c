package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// retentionEnv: finished work is kept one second, events three, and
// retention runs five times a second.
var retentionEnv = []string{"BACKSTOP_RETENTION_SUCCEEDED=1s", "BACKSTOP_RETENTION_EVENTS=3s",
	"BACKSTOP_RETENTION_INTERVAL=200ms"}

// startServeEnv starts `backstop serve --dev` on addr with extra
// environment; it is stopped (SIGTERM) at cleanup.
func startServeEnv(t *testing.T, db, addr string, env []string) *serveProc {
	t.Helper()
	return startServeProc(t, addr, env, "--db", db, "serve", "--dev", "--addr", addr, "--maintenance-interval", "100ms")
}

// startDBWorker starts `backstop work` on the database (not --server) for
// queue, succeeding every task.
func startDBWorker(t *testing.T, db, id, q string, env []string) *worker {
	t.Helper()
	cmd := exec.Command(binary, "--db", db, "work", "--queue", q, "--id", id, "--leader-ttl", "3s",
		"--", "sh", "-c", "cat >/dev/null; exit 0")
	cmd.Env = append(os.Environ(), env...)
	return startProc(t, cmd, filepath.Join(t.TempDir(), id+".stderr"), id, 10*time.Second)
}

// leaderOf reads who holds a leadership ("" when nobody).
func leaderOf(t *testing.T, c *backstop.Client, name string) *store.Leader {
	t.Helper()
	l, err := c.Store().Leader(context.Background(), name)
	if errors.Is(err, store.ErrNotFound) {
		return &store.Leader{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// leastPrivilegeURLs applies deploy/postgres/roles.sql (as
// store/pgstore/roles_test.go does) to the test's schema and returns
// URLs that log in as a member of backstop_admin and of backstop_worker.
func leastPrivilegeURLs(t *testing.T, owner string) (admin, worker string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	var sfx [4]byte
	_, _ = rand.Read(sfx[:])
	tag := hex.EncodeToString(sfx[:])
	raw, err := os.ReadFile("../../deploy/postgres/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), `\`) {
			lines = append(lines, l)
		}
	}
	script := strings.ReplaceAll(strings.Join(lines, "\n"), `:"schema"`, pgx.Identifier{schema}.Sanitize())
	roles := []string{"producer", "worker", "admin"}
	for _, r := range roles {
		// Whole words only: backstop_worker is a role, backstop_workers a table.
		script = regexp.MustCompile(`\bbackstop_`+r+`\b`).ReplaceAllLiteralString(script, "backstop_"+r+"_"+tag)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, r := range roles {
			for _, name := range []string{"backstop_" + r + "_" + tag, "login_" + r + "_" + tag} {
				_, _ = conn.Exec(ctx, "DROP OWNED BY "+name)
				_, _ = conn.Exec(ctx, "DROP ROLE IF EXISTS "+name)
			}
		}
	})
	if _, err := conn.Exec(ctx, script); err != nil {
		t.Fatalf("roles.sql: %v", err)
	}
	login := func(r string) string {
		name := "login_" + r + "_" + tag
		if _, err := conn.Exec(ctx, "CREATE ROLE "+name+" LOGIN IN ROLE backstop_"+r+"_"+tag); err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(owner)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(name)
		return u.String()
	}
	return login("admin"), login("worker")
}

// TestServeRetainsWithRemoteWorkers: `serve` plus a `work --server`
// worker, on Postgres, with a retention of one second: the succeeded tasks
// are deleted, and so are the events older than the events' retention (a
// waiting task's own task.enqueued event), while that task stays.
func TestServeRetainsWithRemoteWorkers(t *testing.T) {
	t.Parallel()
	db := testdb.Postgres(t)
	retentionScenario(t, db, db, "")
}

// TestServeRetainsWithLeastPrivilegeRoles: the same with the roles of
// docs/postgres-roles.md: serve logs in as a member of backstop_admin, and
// a `backstop work` process on the database logs in as a member of
// backstop_worker (which may not delete) and leads maintenance first. It
// takes no retention duty (one warning) instead of switching retention off
// for everyone: serve runs it, and the tasks both ran are deleted.
func TestServeRetainsWithLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	owner := testdb.Postgres(t)
	remoteClient(t, owner) // migrate as the schema's owner, before the roles
	admin, worker := leastPrivilegeURLs(t, owner)
	retentionScenario(t, owner, admin, worker)
}

func retentionScenario(t *testing.T, owner, serveDB, workerDB string) {
	c := remoteClient(t, owner)
	ctx := context.Background()
	var local *worker
	if workerDB != "" {
		local = startDBWorker(t, workerDB, "least-privilege", "local", retentionEnv)
		testwait.For(t, "the least-privilege worker to lead maintenance", func() bool {
			return leaderOf(t, c, backstop.MaintenanceLeadership).LeaderID == "least-privilege"
		})
	}
	addr := freeAddr(t)
	srv := startServeEnv(t, serveDB, addr, retentionEnv)
	startRemoteWorker(t, "http://"+addr, "remote", nil)

	var done []string
	for _, q := range []string{"remote", "local"} {
		if q == "local" && workerDB == "" {
			continue
		}
		for range 10 {
			r, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: q, Kind: "ok", Payload: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			done = append(done, r.Task.ID)
		}
	}
	idle, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "idle", Kind: "ok", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	// Only succeeded tasks go after one second (dead letters would stay
	// a month, failures would stay scheduled).
	testwait.For(t, "every succeeded task to be deleted by retention", func() bool {
		for _, id := range done {
			if _, err := c.Get(ctx, id); !errors.Is(err, backstop.ErrNotFound) {
				return false
			}
		}
		return true
	})
	testwait.For(t, "the waiting task's old events to be deleted by retention", func() bool {
		p, err := c.ReadEvents(ctx, backstop.ReadEventsParams{Stream: "task." + idle.Task.ID})
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Events) == 0
	})
	if x, err := c.Get(ctx, idle.Task.ID); err != nil || x.State != bt.StatePending {
		t.Fatalf("the waiting task: %v %v; want it kept, pending", x, err)
	}
	if !strings.Contains(srv.log.String(), "retention deleted finished work") {
		t.Error("serve's log does not record a retention round")
	}
	if local != nil {
		logs, err := os.ReadFile(local.stderr)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(logs), "retention disabled in this process") {
			t.Errorf("the least-privilege worker's log does not say it took no retention duty:\n%s", logs)
		}
	}
}

// TestTwoServesOneMaintainer: two `serve` processes on one Postgres join
// the maintenance election: the first one leads (the leadership row names
// it through several renewals, and only its log records taking it); when it
// is SIGKILLed the other takes the leadership over within the TTL (plus a
// margin for a slow machine) and maintains: a scheduled task is promoted.
func TestTwoServesOneMaintainer(t *testing.T) {
	t.Parallel()
	db := testdb.Postgres(t)
	c := remoteClient(t, db)
	const ttl = 3 * time.Second
	env := []string{"BACKSTOP_LEADER_TTL=" + ttl.String()}
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := startServeEnv(t, db, addrA, env)
	isA := func(l *store.Leader) bool { return strings.HasSuffix(l.LeaderID, "-"+addrA) }
	isB := func(l *store.Leader) bool { return strings.HasSuffix(l.LeaderID, "-"+addrB) }
	testwait.For(t, "the first serve to lead maintenance", func() bool { return isA(leaderOf(t, c, backstop.MaintenanceLeadership)) })
	b := startServeEnv(t, db, addrB, env)

	// Three renewals by a (every TTL/3) with b standing: the row always
	// names a, and b never took the leadership.
	first := leaderOf(t, c, backstop.MaintenanceLeadership)
	renewals, last := 0, first.ExpiresAt
	testwait.For(t, "three renewals of the first serve's lease", func() bool {
		l := leaderOf(t, c, backstop.MaintenanceLeadership)
		if !isA(l) {
			t.Fatalf("leadership %q while the first serve lives; want %s", l.LeaderID, first.LeaderID)
		}
		if l.ExpiresAt.After(last) {
			renewals, last = renewals+1, l.ExpiresAt
		}
		return renewals >= 3
	})
	if !strings.Contains(a.log.String(), "maintenance leadership taken") {
		t.Fatal("the first serve's log does not record taking the leadership")
	}
	if strings.Contains(b.log.String(), "maintenance leadership taken") {
		t.Fatal("the second serve took the leadership while the first one led")
	}

	a.kill(t)
	killedAt := time.Now()
	testwait.For(t, "the second serve to take the leadership over", func() bool { return isB(leaderOf(t, c, backstop.MaintenanceLeadership)) })
	took := time.Since(killedAt)
	t.Logf("the second serve took over %s after the kill (TTL %s)", took.Round(time.Millisecond), ttl)
	if took > ttl+15*time.Second {
		t.Fatalf("takeover after %s; want within the TTL %s", took, ttl)
	}
	// The row is written before the log line (and the line then crosses a
	// pipe): wait for it rather than look once.
	testwait.For(t, "the second serve's log to record taking the leadership", func() bool {
		return strings.Contains(b.log.String(), "maintenance leadership taken")
	})
	r, err := c.Enqueue(context.Background(), backstop.EnqueueParams{Queue: "later", Kind: "k", Payload: []byte(`{}`),
		Delay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the new leader to promote a scheduled task", func() bool {
		x, err := c.Get(context.Background(), r.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		return x.State == bt.StatePending
	})
}
