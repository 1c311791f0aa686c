package cli

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// TestWorkLabelsAndVersion: `backstop work --label k=v --version V` puts
// the worker's labels and version in the registry, on --db (the library
// Worker) and over --server (the worker protocol's registration); bad
// labels exit 2 naming --label, nothing run.
func TestWorkLabelsAndVersion(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "operator")
		for _, mode := range []string{"db", "server"} {
			id := "labelled-" + mode
			args := []string{"work", "--queue", "lq-" + mode, "--id", id, "--label", "team=billing", "--label", "region=eu-1",
				"--version", "v1.2.3", "--exit-after-idle", "200ms", "--", "true"}
			var got cliResult
			if mode == "db" {
				got = e.run("", args...)
			} else {
				got = r.remote("", args...)
			}
			if got.code != 0 {
				t.Fatalf("%s: work: %+v", mode, got)
			}
			var w backstop.WorkerInfo
			e.json(&w, "workers", "show", id)
			// The CLI adds runner=exec (the console's Workers page reads it).
			if w.Version != "v1.2.3" || len(w.Labels) != 3 || w.Labels["team"] != "billing" || w.Labels["region"] != "eu-1" ||
				w.Labels["runner"] != "exec" {
				t.Errorf("%s: worker %+v, want labels team=billing, region=eu-1, runner=exec and version v1.2.3", mode, w)
			}
		}
		for _, bad := range [][]string{{"--label", "nokey"}, {"--label", "a=1", "--label", "a=2"}, {"--label", "bad key=1"},
			{"--label", "k=" + strings.Repeat("x", 256)}, {"--version", strings.Repeat("v", 256)}} {
			args := append(append([]string{"work", "--queue", "lq-bad", "--id", "bad", "--exit-after-idle", "100ms"}, bad...), "--", "true")
			got := e.run("", args...)
			want := "--label"
			if bad[0] == "--version" {
				want = "--version"
			}
			if got.code != ExitUsage || !strings.Contains(got.stderr, want) {
				t.Errorf("work %v: exit %d, stderr %q; want %d naming %s", bad, got.code, got.stderr, ExitUsage, want)
			}
		}
		var w []backstop.WorkerInfo
		e.json(&w, "workers", "list", "--queue", "lq-bad")
		if len(w) != 0 {
			t.Errorf("a refused work registered %+v", w)
		}
	})
}

// TestWorkersStaleAfterEnv: BACKSTOP_WORKERS_STALE_AFTER (workers.stale_after)
// sets when a worker not seen reads as stale, for the CLI on --db; a bad
// value exits 2 naming the variable. (Not parallel: it sets the
// environment.)
func TestWorkersStaleAfterEnv(t *testing.T) {
	forEachDBSerial(t, func(t *testing.T, e *cliEnv) {
		ctx := context.Background()
		s, err := dburl.Open(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterWorker(ctx, store.WorkerInfo{ID: "quiet", Host: "h", Queues: []string{"q"},
			StartedAt: time.Now().Add(-30 * time.Second)}); err != nil {
			t.Fatal(err)
		}
		state := func() string {
			var w backstop.WorkerInfo
			e.json(&w, "workers", "show", "quiet")
			return string(w.State)
		}
		if st := state(); st != "active" {
			t.Fatalf("seen 30s ago, default threshold: %s", st)
		}
		t.Setenv("BACKSTOP_WORKERS_STALE_AFTER", "10s")
		if st := state(); st != "stale" {
			t.Fatalf("seen 30s ago, workers.stale_after 10s: %s", st)
		}
		for _, bad := range []string{"soon", "10ms"} {
			t.Setenv("BACKSTOP_WORKERS_STALE_AFTER", bad)
			e.fails(ExitUsage, "BACKSTOP_WORKERS_STALE_AFTER", "workers", "list")
		}
	})
}

// forEachDBSerial is forEachDB without t.Parallel (for t.Setenv).
func forEachDBSerial(t *testing.T, fn func(t *testing.T, e *cliEnv)) {
	t.Helper()
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		t.Run(db.name, func(t *testing.T) { fn(t, &cliEnv{t: t, db: db.url(t)}) })
	}
}

// TestWorkLogLevel: `work` logs at --log-level, or log.level from
// --config, on --db and over --server.
func TestWorkLogLevel(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "operator")
		cfg := t.TempDir() + "/warn.yaml"
		if err := os.WriteFile(cfg, []byte("log:\n  level: warn\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			args  []string
			quiet bool
		}{
			{[]string{"--log-level", "warn"}, true},
			{[]string{"--config", cfg}, true},
			{[]string{"--config", cfg, "--log-level", "info"}, false},
			{nil, false},
		} {
			args := append(append([]string{"work", "--queue", "ll"}, tc.args...), "--exit-after-idle", "100ms", "--", "true")
			for _, got := range []cliResult{e.run("", args...), r.remote("", args...)} {
				if got.code != 0 || strings.Contains(got.stderr, `"worker stopped"`) == tc.quiet {
					t.Errorf("work %v: exit %d, stderr %q; want info lines: %v", tc.args, got.code, got.stderr, !tc.quiet)
				}
			}
		}
	})
}
