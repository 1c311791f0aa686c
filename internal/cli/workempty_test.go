package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testdb"
)

// workWithin runs `backstop work` (args after "work") and fails the test
// when it has not exited within a minute: --exit-when-empty must exit on
// its own.
func workWithin(t *testing.T, run func(stdin string, args ...string) cliResult, args ...string) cliResult {
	t.Helper()
	done := make(chan cliResult, 1)
	go func() { done <- run("", append([]string{"work"}, args...)...) }()
	select {
	case r := <-done:
		return r
	case <-time.After(time.Minute):
		t.Fatal("work --exit-when-empty did not exit within a minute")
		return cliResult{}
	}
}

// states counts queue q's tasks by state, and their executions.
func (e *cliEnv) states(q string) (map[string]int, int) {
	e.t.Helper()
	var ts []taskOut
	e.json(&ts, "tasks", "list", "--queue", q, "--limit", "1000")
	n := map[string]int{}
	execs := 0
	for _, tk := range ts {
		n[string(tk.State)]++
		var full taskOut
		e.json(&full, "tasks", "show", tk.ID)
		if full.Executions != nil {
			execs += len(*full.Executions)
		}
	}
	return n, execs
}

// TestWorkExitWhenEmpty: `work --exit-when-empty` (on the database and
// over --server; on the database claiming ahead) drains the queue and
// exits 0 on its own: every task succeeded with one execution, the slow
// one included — it does not exit
// (and kill it: --grace 1ms) while a program still runs — and a task
// scheduled for later neither keeps it running nor is run.
func TestWorkExitWhenEmpty(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("migrate")
		r := newRemoteEnv(t, e, "admin")
		for _, mode := range []struct {
			name  string
			run   func(stdin string, args ...string) cliResult
			extra []string
		}{{"db", e.run, []string{"--prefetch", "2"}}, {"server", r.remote, nil}} {
			q := "dq" + mode.name
			const n = 12
			for i := range n {
				kind := "quick"
				if i == 0 {
					kind = "slow"
				}
				e.ok("enqueue", "--queue", q, "--kind", kind)
			}
			e.ok("enqueue", "--queue", q, "--kind", "later", "--delay", "1h")
			// The slow task outlasts every other, so the queue is found
			// empty while it runs; exiting then would kill it.
			args := append([]string{"--queue", q, "--concurrency", "3", "--exit-when-empty", "--grace", "1ms"}, mode.extra...)
			work := workWithin(t, mode.run, append(args, "--", "sh", "-c", `[ "$BACKSTOP_KIND" = slow ] && sleep 1.5; exit 0`)...)
			if work.code != 0 {
				t.Fatalf("%s: work exited %d: %s", mode.name, work.code, work.stderr)
			}
			if !strings.Contains(work.stderr, `"reason":"empty"`) {
				t.Errorf("%s: no drain for the reason empty in:\n%s", mode.name, work.stderr)
			}
			got, execs := e.states(q)
			if got["succeeded"] != n || got["scheduled"] != 1 || len(got) != 2 || execs != n {
				t.Fatalf("%s: states %v with %d executions, want %d succeeded with one execution each and 1 scheduled\n%s",
					mode.name, got, execs, n, work.stderr)
			}
		}
	})
}

// TestWorkExitWhenEmptyAtOnce: with nothing claimable at all (an empty
// queue, or only a task scheduled for later) it exits 0 at once.
func TestWorkExitWhenEmptyAtOnce(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("migrate")
		e.ok("enqueue", "--queue", "later", "--kind", "k", "--delay", "1h")
		for _, q := range []string{"none", "later"} {
			work := workWithin(t, e.run, "--queue", q, "--exit-when-empty", "--", "true")
			if work.code != 0 {
				t.Fatalf("%s: work exited %d: %s", q, work.code, work.stderr)
			}
		}
		// Two queues, in one worker and in two (a worker per lease): it
		// waits for both.
		cfg := filepath.Join(t.TempDir(), "backstop.yaml")
		if err := os.WriteFile(cfg, []byte("queues:\n  two1:\n    lease: 20s\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, extra := range [][]string{nil, {"--config", cfg}} {
			for i := range 4 {
				e.ok("enqueue", "--queue", fmt.Sprintf("two%d", i%2), "--kind", "k")
			}
			args := append(append([]string{"--queue", "two0", "--queue", "two1"}, extra...), "--exit-when-empty", "--", "true")
			work := workWithin(t, e.run, args...)
			if work.code != 0 {
				t.Fatalf("two queues %v: work exited %d: %s", extra, work.code, work.stderr)
			}
			for _, q := range []string{"two0", "two1"} {
				if got, _ := e.states(q); got["pending"] != 0 || got["running"] != 0 {
					t.Fatalf("two queues %v: %s: states %v, want all succeeded", extra, q, got)
				}
			}
		}
	})
}

// TestWorkExitWhenEmptyExcludesIdle: --exit-when-empty and
// --exit-after-idle exclude each other, on the database and over
// --server: a usage error naming both, nothing run.
func TestWorkExitWhenEmptyExcludesIdle(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	e.ok("migrate")
	e.ok("enqueue", "--queue", "x", "--kind", "k")
	for _, pre := range [][]string{nil, {"--server", "http://127.0.0.1:1", "--token", "t"}} {
		e.fails(ExitUsage, "--exit-when-empty and --exit-after-idle", append(pre, "work", "--queue", "x",
			"--exit-when-empty", "--exit-after-idle", "1s", "--", "true")...)
	}
	if got, _ := e.states("x"); got["pending"] != 1 {
		t.Fatalf("states %v, want the task still pending", got)
	}
}
