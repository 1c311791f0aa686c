package main

// Dead-letter operations with real processes: concurrent `backstop dlq
// replay` of one id from two processes, and a `backstop dlq redrive` killed
// with SIGKILL halfway then run again. On SQLite and, under
// scripts/with-postgres, on PostgreSQL.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// deadLetters makes n dead letters in queue q and returns the client.
func deadLetters(t *testing.T, url, q string, n int) *backstop.Client {
	t.Helper()
	ctx := context.Background()
	s, c := storeClient(t, url)
	for start := 0; start < n; start += 1000 {
		params := make([]backstop.EnqueueParams, 0, 1000)
		for i := start; i < min(n, start+1000); i++ {
			params = append(params, backstop.EnqueueParams{ID: fmt.Sprintf("%s-%05d", q, i), Queue: q, Kind: "job"})
		}
		if _, err := c.EnqueueMany(ctx, params); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		got, err := s.Claim(ctx, store.ClaimParams{Queue: q, WorkerID: "test", Max: len(params), Now: now, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ss := make([]store.Settlement, len(got))
		for i, task := range got {
			ss[i] = store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: bt.OutcomePermanentError,
				Error: "boom", FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
		}
		if _, err := s.Settle(ctx, ss); err != nil {
			t.Fatal(err)
		}
	}
	return c
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
			cmd := exec.Command(binary, "--db", url, "dlq", "redrive", "--queue", "redrive", "--rate", "1000", "--yes", "-o", "json")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			killed := false
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var p backstop.RedriveProgress
				if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
					t.Fatalf("progress line %q: %v", sc.Text(), err)
				}
				if p.Replayed >= n/4 {
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					killed = true
					break
				}
			}
			_ = cmd.Wait()
			if !killed {
				t.Fatal("the redrive finished before it could be killed")
			}
			ctx := context.Background()
			count := func(state backstop.State) int {
				total, after := 0, ""
				for {
					ts, err := c.List(ctx, backstop.ListParams{Queue: "redrive", States: []backstop.State{state}, AfterID: after, Limit: 1000})
					if err != nil {
						t.Fatal(err)
					}
					total += len(ts)
					if len(ts) < 1000 {
						return total
					}
					after = ts[len(ts)-1].ID
				}
			}
			if left := count(backstop.StateDead); left == 0 || left == n {
				t.Fatalf("after the kill %d of %d are still dead; want some", left, n)
			}
			out, err := exec.Command(binary, "--db", url, "dlq", "redrive", "--queue", "redrive", "--rate", "0", "--yes").CombinedOutput()
			if err != nil {
				t.Fatalf("re-run: %v: %s", err, out)
			}
			t.Logf("re-run: %s", out)
			if got := count(backstop.StatePending); got != n {
				t.Fatalf("%d of %d pending after the re-run", got, n)
			}
			after := ""
			for {
				ts, err := c.List(ctx, backstop.ListParams{Queue: "redrive", AfterID: after, Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				for _, task := range ts {
					if task.ReplayCount != 1 {
						t.Fatalf("%s replayed %d times", task.ID, task.ReplayCount)
					}
				}
				if len(ts) < 1000 {
					break
				}
				after = ts[len(ts)-1].ID
			}
		})
	}
}
