package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/store"
)

// TestOrderedReplayRunsBeforeTheKeysLaterTasks is issue 17's order-aware
// replay with real processes, on both stores (the library-level proof is
// the conformance Ordering/ReplayHoldsTheKeyAndClosesItsGap): on an
// ordered queue, key k's task 1 died while 2 and 3 wait behind it, and
// before any worker saw the death `backstop dlq replay 1 --hold-key` from
// one process puts 1 back in its key's sequence; a `backstop work` process
// with four slots then runs the replay to its end before it starts 2, then
// 3: the replay runs in sequence with the key's later tasks held. (Before
// the fix of the ordering pass, the key stayed busy with the task it
// replayed and nothing of k ever ran.)
func TestOrderedReplayRunsBeforeTheKeysLaterTasks(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			url := st.url(t)
			ctx := context.Background()
			s, err := dburl.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			c, err := backstop.NewClient(s, &backstop.Config{Queues: map[string]backstop.QueueConfig{
				"ord": {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1}}}})
			if err != nil {
				t.Fatal(err)
			}
			enqueue := func(id string, seq int64) {
				t.Helper()
				if _, err := c.Enqueue(ctx, backstop.EnqueueParams{ID: id, Queue: "ord", Kind: "job", OrderingKey: "k", Sequence: seq}); err != nil {
					t.Fatal(err)
				}
			}
			// 1 runs and dies while 2 and 3 wait behind it.
			enqueue("one", 1)
			enqueue("two", 2)
			enqueue("three", 3)
			if err := c.OrderQueue(ctx, "ord"); err != nil {
				t.Fatal(err)
			}
			got, err := s.Claim(ctx, store.ClaimParams{Queue: "ord", WorkerID: "test", Max: 10, Now: time.Now(), Lease: time.Minute})
			if err != nil || len(got) != 1 || got[0].ID != "one" {
				t.Fatalf("claim: %v %v", got, err)
			}
			if _, err := s.Settle(ctx, []store.Settlement{{TaskID: "one", ExecutionID: got[0].ExecutionID, Outcome: bt.OutcomePermanentError,
				Error: "boom", FinishedAt: time.Now(), State: bt.StateDead, DeadReason: bt.ReasonPermanentError}}); err != nil {
				t.Fatal(err)
			}

			// No worker ran since: 2 and 3 still wait.
			for _, id := range []string{"two", "three"} {
				if task, err := c.Get(ctx, id); err != nil || task.State != backstop.StateBuffered {
					t.Fatalf("%s after the death: %+v %v", id, task, err)
				}
			}
			env := append(os.Environ(), "BACKSTOP_QUEUES_ORD_ORDERING_ENABLED=true", "BACKSTOP_QUEUES_ORD_ORDERING_STEP=1")
			replay := exec.Command(binary, "--db", url, "dlq", "replay", "one", "--hold-key", "--reason", "card fixed")
			replay.Env = env
			if out, err := replay.CombinedOutput(); err != nil {
				t.Fatalf("replay: %v: %s", err, out)
			}
			runLog := filepath.Join(t.TempDir(), "run.log")
			work := exec.Command(binary, "--db", url, "work", "--queue", "ord", "--concurrency", "4", "--exit-after-idle", "1s",
				"--", "sh", "-c", `cat >/dev/null; echo "start $BACKSTOP_TASK_ID" >> "$RUN_LOG"; sleep 0.2; echo "end $BACKSTOP_TASK_ID" >> "$RUN_LOG"`)
			work.Env = append(env, "RUN_LOG="+runLog)
			if out, err := work.CombinedOutput(); err != nil {
				t.Fatalf("work: %v: %s", err, out)
			}
			b, err := os.ReadFile(runLog)
			if err != nil {
				t.Fatal(err)
			}
			// The replay first, to its end; then 2, then 3.
			want := "start one|end one|start two|end two|start three|end three"
			if got := strings.Join(strings.Split(strings.TrimSpace(string(b)), "\n"), "|"); got != want {
				t.Fatalf("runs: %q, want %q", got, want)
			}
			task, err := c.Get(ctx, "one")
			if err != nil || task.State != backstop.StateSucceeded || task.ReplayCount != 1 {
				t.Fatalf("one: %+v %v", task, err)
			}
		})
	}
}
