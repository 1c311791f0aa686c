package main

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testlog"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestRemoteDrainMidClaim: a real `backstop work --server` process,
// long-polling an empty queue, is SIGTERMed just as a batch of tasks
// arrives (0 to 14 ms after the enqueue, a round each), so that its drain
// meets its claim in every state: waiting, claiming, answered. However they
// interleave, no task is left running: each ends succeeded (attempt 1, one
// succeeded execution) or pending and uncharged (attempt 0, every execution
// released: claimed as the worker drained). A drain that hung up on its
// claim left the claimed tasks running until their leases expired.
func TestRemoteDrainMidClaim(t *testing.T) {
	t.Parallel()
	const rounds, batch = 8, 20
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, st.url(t))
			ctx := context.Background()
			cl := apiclient.New(base, "")
			var succeeded, released, untouched int
			for round := range rounds {
				q, id := fmt.Sprintf("md%d", round), fmt.Sprintf("md-%s-%d", st.name, round)
				work := exec.Command(binary, "--server", base, "work", "--queue", q, "--concurrency", "4", "--id", id,
					"--grace", "20s", "--", "true")
				workLog := &testlog.Buffer{}
				work.Stderr, work.Stdout = workLog, workLog
				if err := work.Start(); err != nil {
					t.Fatal(err)
				}
				exited := make(chan error, 1)
				go func() { exited <- work.Wait() }()
				// Registered: its claimers start next, and wait for work.
				testwait.For(t, "the worker to register", func() bool { _, err := cl.Worker(ctx, id); return err == nil })
				time.Sleep(100 * time.Millisecond)
				tasks := make([]apiclient.Task, batch)
				for i := range tasks {
					tasks[i] = apiclient.Task{Queue: q, Kind: "k", MaxAttempts: 3}
				}
				res, err := cl.EnqueueBatch(ctx, tasks)
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Duration(2*round) * time.Millisecond)
				if err := work.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-exited:
					if err != nil {
						t.Fatalf("round %d: work exited with %v; log:\n%s", round, err, workLog.String())
					}
				case <-time.After(30 * time.Second):
					_ = work.Process.Kill()
					<-exited
					t.Fatalf("round %d: work did not stop within 30s of SIGTERM; log:\n%s", round, workLog.String())
				}
				for _, r := range res.Results {
					v, err := cl.Get(ctx, r.Task.ID)
					if err != nil {
						t.Fatal(err)
					}
					var ex []bt.Execution
					if v.Executions != nil {
						ex = *v.Executions
					}
					allReleased := true
					for _, e := range ex {
						allReleased = allReleased && e.Outcome == bt.OutcomeReleased
					}
					switch {
					case v.State == bt.StateSucceeded && v.Attempt == 1 && len(ex) == 1 && ex[0].Outcome == bt.OutcomeSucceeded:
						succeeded++
					case v.State == bt.StatePending && v.Attempt == 0 && allReleased && len(ex) > 0:
						released++
					case v.State == bt.StatePending && v.Attempt == 0 && len(ex) == 0:
						untouched++
					default:
						t.Fatalf("round %d: task %s after the drain: state %s attempt %d executions %+v; want succeeded once or pending uncharged; log:\n%s",
							round, v.ID, v.State, v.Attempt, ex, workLog.String())
					}
				}
			}
			t.Logf("%d rounds of %d tasks: %d succeeded, %d released uncharged, %d never claimed", rounds, batch,
				succeeded, released, untouched)
		})
	}
}
