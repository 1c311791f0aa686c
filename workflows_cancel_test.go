package backstop

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

const cancelSagaYAML = `name: order
queue: wf
rollback: on_fail
steps:
  - {id: reserve, kind: reserve, compensate: release}
  - {id: charge, kind: charge, needs: [reserve], compensate: refund}
  - {id: release, kind: release, compensation: true}
  - {id: refund, kind: refund, compensation: true}
`

// TestWorkflowCancelReachesHandlers: canceling a run while an in-process
// handler runs cancels the handler's context (cause ErrTaskCanceled) within
// a heartbeat; the run stays compensating until the handler returned. A
// handler that stops ends its step canceled (only release runs); one that
// finishes its work anyway succeeds, and is refunded before the release.
func TestWorkflowCancelReachesHandlers(t *testing.T) {
	t.Parallel()
	for _, finish := range []bool{false, true} {
		name := "stops"
		if finish {
			name = "finishes"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			forEachWorkflowStore(t, func(t *testing.T, c *Client) {
				ctx := context.Background()
				applyYAML(t, c, cancelSagaYAML)
				started, release := make(chan struct{}), make(chan struct{})
				var (
					mu    sync.Mutex
					order []string
					cause error
				)
				mark := func(k string) {
					mu.Lock()
					defer mu.Unlock()
					order = append(order, k)
				}
				w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"wf": 4}, PollInterval: 10 * time.Millisecond,
					MaintenanceInterval: -1, Lease: 3 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range []string{"reserve", "release", "refund"} {
					w.Handle(k, HandlerFunc(func(ctx context.Context, _ *Task) error { mark(k); return nil }))
				}
				w.Handle("charge", HandlerFunc(func(ctx context.Context, _ *Task) error {
					close(started)
					<-ctx.Done()
					mu.Lock()
					cause = context.Cause(ctx)
					mu.Unlock()
					<-release // the test looks at the run while the handler still runs
					mark("charge")
					if finish {
						return nil // the charge went through before it could stop
					}
					return ctx.Err()
				}))
				if err := w.Start(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = w.Stop(context.Background()) })
				run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "order"})
				if err != nil {
					t.Fatal(err)
				}
				<-started
				r, err := c.CancelRun(ctx, run.RunID)
				if err != nil {
					t.Fatal(err)
				}
				if r.State != workflow.RunCompensating {
					t.Fatalf("right after the cancel: %s, want compensating", r.State)
				}
				// The handler's context ends (its cause says why), and the
				// run waits for it.
				var got error
				testwait.For(t, "the cancel to reach the handler", func() bool {
					mu.Lock()
					got = cause
					mu.Unlock()
					return got != nil
				})
				if got != ErrTaskCanceled {
					t.Errorf("the handler's context cause: %v, want ErrTaskCanceled", got)
				}
				if r, _ := c.WorkflowRun(ctx, run.RunID); r.State != workflow.RunCompensating || stepOf(r, "charge").State != workflow.StepPending {
					t.Fatalf("while charge's handler runs: run %s, charge %s", r.State, stepOf(r, "charge").State)
				}
				close(release)
				r = waitRun(t, c, run.RunID, workflow.RunCanceled, workflow.RunCompensated, workflow.RunCompensationFailed)
				mu.Lock()
				defer mu.Unlock()
				want := []string{"reserve", "charge", "release"}
				wantCharge := store.StepState(workflow.StepCanceled)
				if finish {
					want = []string{"reserve", "charge", "refund", "release"}
					wantCharge = workflow.StepSucceeded
				}
				if r.State != workflow.RunCanceled || stepOf(r, "charge").State != wantCharge || !slices.Equal(order, want) {
					t.Errorf("run %s, charge %s, handlers %v; want canceled, %s, %v", r.State, stepOf(r, "charge").State, order, wantCharge, want)
				}
			})
		})
	}
}
