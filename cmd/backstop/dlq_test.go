package main

// Dead-letter operations with real processes: concurrent `backstop dlq
// replay` of one id from two processes, and a `backstop dlq redrive` killed
// with SIGKILL halfway then run again. On SQLite and, under
// scripts/with-postgres, on PostgreSQL.

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// deadLetters makes n dead letters in queue q and returns the client.
func deadLetters(t *testing.T, url, q string, n int) *backstop.Client {
	t.Helper()
	s, c := storeClient(t, url)
	params := make([]backstop.EnqueueParams, n)
	for i := range params {
		params[i] = backstop.EnqueueParams{ID: fmt.Sprintf("%s-%05d", q, i), Queue: q, Kind: "job"}
	}
	makeDeadLetters(t, s, c, params, func(string) string { return "boom" })
	return c
}

// makeDeadLetters enqueues params (each with its ID and a queue of its
// own or shared), claims and settles them as permanent errors with the
// error errOf gives each id: dead letters in bulk, through the store.
func makeDeadLetters(t *testing.T, s store.Store, c *backstop.Client, params []backstop.EnqueueParams, errOf func(id string) string) {
	t.Helper()
	ctx := context.Background()
	for start := 0; start < len(params); start += 1000 {
		batch := params[start:min(len(params), start+1000)]
		if _, err := c.EnqueueMany(ctx, batch); err != nil {
			t.Fatal(err)
		}
		queues := map[string]int{}
		for _, p := range batch {
			queues[p.Queue]++
		}
		now := time.Now()
		for q, k := range queues {
			got, err := s.Claim(ctx, store.ClaimParams{Queue: q, WorkerID: "test", Max: k, Now: now, Lease: time.Minute})
			if err != nil || len(got) != k {
				t.Fatalf("claim %s: %d of %d: %v", q, len(got), k, err)
			}
			ss := make([]store.Settlement, len(got))
			for i, task := range got {
				ss[i] = store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: bt.OutcomePermanentError,
					Error: errOf(task.ID), FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
			}
			if _, err := s.Settle(ctx, ss); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestDLQReplayFromTwoProcesses(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			url := st.url(t)
			c := deadLetters(t, url, "dlq", 5)
			for i := range 5 {
				id := fmt.Sprintf("dlq-%05d", i)
				var (
					wg   sync.WaitGroup
					mu   sync.Mutex
					wins int
				)
				for range 2 {
					wg.Go(func() {
						out, err := exec.Command(binary, "--db", url, "dlq", "replay", id, "-o", "json").Output()
						if err != nil {
							t.Errorf("replay %s: %v", id, err)
							return
						}
						var r backstop.ReplayResult
						if err := json.Unmarshal(out, &r); err != nil {
							t.Errorf("replay %s: %v: %s", id, err, out)
							return
						}
						if r.Replayed {
							mu.Lock()
							wins++
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				if wins != 1 {
					t.Fatalf("%s: %d processes replayed it, want exactly 1", id, wins)
				}
				task, err := c.Get(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if task.ReplayCount != 1 || task.State != backstop.StatePending {
					t.Fatalf("%s: replay_count %d, state %s", id, task.ReplayCount, task.State)
				}
			}
		})
	}
}

func TestDLQRedriveKilledHalfwayThenResumed(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			const n = 2000
			url := st.url(t)
			c := deadLetters(t, url, "redrive", n)
			// At 1000/s the redrive takes about two seconds; kill it once a
			// quarter is done.
			last := killRedriveWhen(t, redriveCmd("--db", url, "dlq", "redrive", "--queue", "redrive", "--rate", "1000", "--yes", "-o", "json"),
				func(p backstop.RedriveProgress) bool { return p.Replayed >= n/4 })
			count := func(state backstop.State) int {
				total := 0
				eachTask(t, c, backstop.ListParams{Queue: "redrive", States: []backstop.State{state}}, func(*backstop.Task) { total++ })
				return total
			}
			if left := count(backstop.StateDead); left == 0 || left == n {
				t.Fatalf("after the kill %d of %d are still dead; want some", left, n)
			}
			// The same redrive again is refused while the killed runner's
			// heartbeat is fresh, and runs once it is stale.
			testwait.For(t, "the killed runner to go stale", func() bool { return redrivesShow(t, url, last.RedriveID).Resumable })
			out, err := redriveCmd("--db", url, "dlq", "redrive", "--queue", "redrive", "--rate", "0", "--yes").CombinedOutput()
			if err != nil {
				t.Fatalf("re-run: %v: %s", err, out)
			}
			t.Logf("re-run: %s", out)
			if got := count(backstop.StatePending); got != n {
				t.Fatalf("%d of %d pending after the re-run", got, n)
			}
			eachTask(t, c, backstop.ListParams{Queue: "redrive"}, func(task *backstop.Task) {
				if task.ReplayCount != 1 {
					t.Fatalf("%s replayed %d times", task.ID, task.ReplayCount)
				}
			})
		})
	}
}
