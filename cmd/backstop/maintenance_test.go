package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// TestManyWorkersLeaderFailover runs three `backstop work` processes on one
// store (5,000 tasks on Postgres, 500 on one SQLite file), SIGKILLs the one
// that leads maintenance in the middle of its tasks, and checks that another
// process takes the leadership over within the leader TTL (plus a margin),
// that the new leader settles the killed attempts as lease_expired so they
// run again, that every task ends succeeded, and that no task ran to the end
// twice unless a lease expired.
func TestManyWorkersLeaderFailover(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			n := 5000
			if st.name == "sqlite" {
				n = 500
			}
			const ttl = 3 * time.Second
			b := setup(t, st.url(t), n)
			ids := []string{"worker-a", "worker-b", "worker-c"}
			procs := map[string]*worker{}
			for _, id := range ids {
				// The idle limit outlasts a lease expiry plus a takeover, so
				// the survivors are still there to rerun the killed tasks.
				procs[id] = b.startWorker(id, "0.01", "--id", id, "--concurrency", "16", "--lease", "3s",
					"--leader-ttl", ttl.String(), "--exit-after-idle", "10s")
			}
			ctx := context.Background()
			ops := b.client.Store()
			leader := func() string {
				l, err := ops.Leader(ctx, backstop.MaintenanceLeadership)
				if errors.Is(err, store.ErrNotFound) {
					return ""
				}
				if err != nil {
					t.Fatal(err)
				}
				return l.LeaderID
			}
			var first string
			b.waitUntil("a leader runs tasks while others have succeeded", func() bool {
				first = leader()
				if first == "" || len(b.list(bt.StateSucceeded)) < 50 {
					return false
				}
				// Several, so that the few whose settles may be in flight at
				// the kill cannot be all of them.
				mine := 0
				for _, x := range b.list(bt.StateRunning) {
					if x.WorkerID == first {
						mine++
					}
				}
				return mine >= 6
			})
			if !slices.Contains(ids, first) {
				t.Fatalf("leader %q is none of the workers %v", first, ids)
			}
			if err := syscall.Kill(-procs[first].cmd.Process.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killedAt := time.Now()
			procs[first].wait(t, first)
			// The dead leader's attempts, once it can change nothing more;
			// the other workers keep changing the rest.
			b.waitSettled(procs[first])
			killed := map[string]*backstop.Task{}
			for id, x := range b.running() {
				if x.WorkerID == first {
					killed[id] = x
				}
			}
			if len(killed) == 0 {
				t.Fatal("the leader had no task running when it was killed")
			}
			t.Logf("killed leader %s with %d tasks running", first, len(killed))

			// Takeover: the row names a survivor within the TTL and a margin
			// (the margin absorbs a slow machine, not a broken election).
			var next string
			b.waitUntil("a survivor to take the leadership over", func() bool {
				next = leader()
				return next != first && next != ""
			})
			if took := time.Since(killedAt); took > ttl+15*time.Second {
				t.Fatalf("a survivor took the leadership %s after the kill; want within the TTL %s", took, ttl)
			}
			t.Logf("%s took over %s after the kill", next, time.Since(killedAt).Round(time.Millisecond))

			for _, id := range ids {
				if id == first {
					continue
				}
				if code := procs[id].wait(t, id); code != 0 {
					t.Fatalf("%s exited with %d", id, code)
				}
			}
			logs, err := os.ReadFile(procs[next].stderr)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(logs), "maintenance leadership taken") {
				t.Errorf("%s's log does not record taking the leadership", next)
			}

			tasks := b.checkHistory()
			runs := b.runs()
			for id, task := range tasks {
				expired := slices.ContainsFunc(task.Executions, func(e backstop.Execution) bool { return e.Outcome == bt.OutcomeLeaseExpired })
				if !expired && (len(task.Executions) != 1 || len(runs[id]) != 1) {
					t.Errorf("task %s: executions %s, %d runs, without a lease expiry; want exactly one", id, outcomes(task.Executions), len(runs[id]))
				}
			}
			for id, k := range killed {
				ex := tasks[id].Executions
				i := slices.IndexFunc(ex, func(e backstop.Execution) bool { return e.ExecutionID == k.ExecutionID })
				if i < 0 || ex[i].Outcome != bt.OutcomeLeaseExpired || ex[i].WorkerID != first || i == len(ex)-1 {
					t.Errorf("task %s: killed execution %s not settled as lease_expired by %s and rerun (%s)", id, k.ExecutionID, first, outcomes(ex))
				}
			}
		})
	}
}
