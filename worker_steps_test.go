package backstop

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/workflow"
)

// A worker draining linear workflows (each step enqueued by the settle of
// the one before, while more runs wait than it has slots) runs every step
// task exactly once, under one attempt that its task row and its events
// record (one task.claimed, one task.succeeded), and never more handlers
// than its slots.
func TestWorkerRunsEachStepTaskOnce(t *testing.T) {
	forEachStoreClient(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		const runs, steps, slots = 12, 5, 3
		bld := workflow.New("chain").Queue("chain")
		for i := range steps {
			st := bld.Step(fmt.Sprintf("s%d", i), "step")
			if i > 0 {
				st.Needs(fmt.Sprintf("s%d", i-1))
			}
		}
		def, err := bld.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ApplyWorkflow(ctx, def); err != nil {
			t.Fatal(err)
		}
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"chain": slots}, PollInterval: 20 * time.Millisecond,
			MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu        sync.Mutex
			ran       = map[string][]string{} // task id -> execution ids
			running   atomic.Int32
			most      atomic.Int32
			completed atomic.Int32
		)
		w.Handle("step", HandlerFunc(func(ctx context.Context, tk *Task) error {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			mu.Lock()
			ran[tk.ID] = append(ran[tk.ID], tk.ExecutionID)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			completed.Add(1)
			return nil
		}))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.Stop(ctx) }()
		ids := make([]string, runs)
		for i := range ids {
			r, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "chain"})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = r.RunID
		}
		for _, id := range ids {
			waitRun(t, c, id, workflow.RunSucceeded)
		}
		if got := completed.Load(); got != runs*steps {
			t.Errorf("%d handler runs, want %d", got, runs*steps)
		}
		if m := most.Load(); m > slots {
			t.Errorf("%d handlers ran at once, slots %d", m, slots)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ran) != runs*steps {
			t.Errorf("%d step tasks ran, want %d", len(ran), runs*steps)
		}
		for id, execs := range ran {
			if len(execs) != 1 {
				t.Errorf("task %s ran %d times", id, len(execs))
				continue
			}
			tk, err := c.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if tk.State != bt.StateSucceeded || tk.Attempt != 1 || tk.ExecutionID != execs[0] {
				t.Errorf("task %s: %s, attempt %d, execution %s; want succeeded, 1, %s", id, tk.State, tk.Attempt, tk.ExecutionID, execs[0])
			}
			var claimed, succeeded int
			testwait.For(t, "task "+id+"'s events", func() bool {
				evs, err := c.Events(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				claimed, succeeded = 0, 0
				for _, e := range evs {
					switch e.Type {
					case "task.claimed":
						claimed++
					case "task.succeeded":
						succeeded++
					}
				}
				return succeeded > 0
			})
			if claimed != 1 || succeeded != 1 {
				t.Errorf("task %s: %d task.claimed and %d task.succeeded events, want 1 each", id, claimed, succeeded)
			}
		}
	})
}
