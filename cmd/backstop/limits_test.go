package main

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testdb"
)

// TestConcurrencyLimitAcrossProcesses: a concurrency limit of 5 on the kind,
// set with `backstop limits set`, holds while 300 tasks drain through three
// `backstop work` processes of 4 slots each (12 slots): the running count,
// sampled from the database every 50 ms, never exceeds 5, and every task
// runs once.
func TestConcurrencyLimitAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Postgres(t), 300)
	if out, err := exec.Command(binary, "--db", b.url, "limits", "set", "job5", "--queue", queue, "--kind", "job",
		"--concurrency", "5").CombinedOutput(); err != nil {
		t.Fatalf("limits set: %v\n%s", err, out)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var (
		mu      sync.Mutex
		most    int
		samples int
		stop    = make(chan struct{})
		done    = make(chan error, 1)
	)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM backstop_tasks WHERE queue = $1 AND kind = 'job' AND state = 'running'`,
				queue).Scan(&n); err != nil {
				done <- err
				return
			}
			mu.Lock()
			most, samples = max(most, n), samples+1
			mu.Unlock()
			select {
			case <-stop:
				done <- nil
				return
			case <-tick.C:
			}
		}
	}()
	var ws []*worker
	for _, name := range []string{"w1", "w2", "w3"} {
		ws = append(ws, b.startWorker(name, "0.02", "--lease", "30s", "--exit-after-idle", "3s"))
	}
	for i, w := range ws {
		if code := w.wait(t, ws[i].stderr); code != 0 {
			t.Fatalf("worker %d exited with %d", i+1, code)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d samples, at most %d running at once", samples, most)
	if most > 5 {
		t.Fatalf("%d tasks ran at once, over the limit of 5", most)
	}
	if most < 2 {
		t.Fatalf("at most %d ran at once: the test did not exercise concurrency", most)
	}
	runs := b.runs()
	for _, id := range b.ids {
		if len(runs[id]) != 1 {
			t.Errorf("task %s ran %d times, want once", id, len(runs[id]))
		}
	}
}

// TestRateLimitAcrossProcesses: a rate limit of 50 starts a second on the
// kind (the issue's), set with `backstop limits set --rate`, holds within
// 5 % over 20 s while three `backstop work` processes of 60 slots each
// drain a backlog that outlasts the window. A worker whose claim the limit
// cut short claims again when the next token is due (every 20 ms across
// the processes), not a poll interval later; the slots are many so that a
// loaded machine's slow program starts do not leave the tokens unused. The
// starts are counted from the executions (started_at is the claim's time;
// a success's execution is its task row's attempted_at: PostgreSQL writes
// no backstop_executions row for it); the backlog never runs dry, so the
// limit, not the supply, set the pace: a limiter that let through 5 % more,
// or lost 5 % of its tokens, fails. It measures a rate, so it is not
// parallel: it runs before the package's parallel tests, alone.
func TestRateLimitAcrossProcesses(t *testing.T) {
	const (
		rate   = 50
		window = 20 * time.Second
		warmup = 3 * time.Second // the first burst and the processes' start
	)
	b := setup(t, testdb.Postgres(t), 2000)
	if out, err := exec.Command(binary, "--db", b.url, "limits", "set", "r50", "--queue", queue, "--kind", "job",
		"--rate", fmt.Sprint(rate)).CombinedOutput(); err != nil {
		t.Fatalf("limits set: %v\n%s", err, out)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, name := range []string{"w1", "w2", "w3"} {
		b.startWorker(name, "0", "--concurrency", "60", "--lease", "30s")
	}
	var first time.Time
	b.waitUntil("a first task started", func() bool {
		var at *time.Time
		err := conn.QueryRow(ctx, `SELECT min(attempted_at) FROM backstop_tasks WHERE queue = $1`, queue).Scan(&at)
		if err != nil || at == nil {
			return false
		}
		first = *at
		return true
	})
	from := first.Add(warmup)
	to := from.Add(window)
	// Executions are written when their tasks settle: wait past the window
	// and a settle's delay.
	time.Sleep(time.Until(to) + 3*time.Second)
	var started, pending int
	if err := conn.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM backstop_executions WHERE started_at >= $1 AND started_at < $2) +
	(SELECT count(*) FROM backstop_tasks WHERE queue = $3 AND state IN ('running', 'succeeded')
		AND attempted_at >= $1 AND attempted_at < $2)`, from, to, queue).Scan(&started); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM backstop_tasks WHERE queue = $1 AND state = 'pending'`,
		queue).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	want := rate * int(window/time.Second)
	t.Logf("%d started in %s (want %d ± 5%%), %d still pending", started, window, want, pending)
	if pending == 0 {
		t.Fatalf("the backlog ran dry: the supply, not the limit, set the pace")
	}
	if lo, hi := want*95/100, want*105/100; started < lo || started > hi {
		t.Fatalf("%d tasks started in %s, want %d..%d (%d/s ± 5%%)", started, window, lo, hi, rate)
	}
}
