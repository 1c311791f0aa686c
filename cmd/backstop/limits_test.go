package main

import (
	"context"
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
