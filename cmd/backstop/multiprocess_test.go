package main

import (
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
)

// TestConcurrentWorkers runs three `backstop work` processes at once on one
// store — one SQLite file, or one Postgres — and checks that every task ran
// exactly once: no double claim across processes, no lease expiry, nothing
// lost.
func TestConcurrentWorkers(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, st.url(t), 300)
			var ws []*worker
			for _, name := range []string{"w1", "w2", "w3"} {
				ws = append(ws, b.startWorker(name, "0.01", "--lease", "30s", "--exit-after-idle", "3s"))
			}
			for i, w := range ws {
				if code := w.wait(t, ws[i].stderr); code != 0 {
					t.Fatalf("worker %d exited with %d", i+1, code)
				}
			}
			tasks := b.checkHistory()
			runs := b.runs()
			workers := map[string]int{}
			for id, task := range tasks {
				if len(task.Executions) != 1 || task.Executions[0].Outcome != bt.OutcomeSucceeded {
					t.Errorf("task %s: executions %s, want exactly one success", id, outcomes(task.Executions))
				}
				if len(runs[id]) != 1 {
					t.Errorf("task %s ran %d times, want once (%q)", id, len(runs[id]), runs[id])
				}
				if len(task.Executions) > 0 {
					workers[task.Executions[0].WorkerID]++
				}
			}
			t.Logf("tasks per worker: %v", workers)
			if len(workers) < 2 {
				t.Errorf("only %d worker process did any work; the test did not exercise concurrency", len(workers))
			}
		})
	}
}
