package backstop

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/backstophq/backstop/workflow"
)

// A run's summary and task list are those of every task whose run_id
// attribute is the run's, found by reading every task (what the summary
// read before the run index): for a for-each fan-out run, a compensated
// run with a plain task that joined it, and plain batches whose ids share
// a prefix, on both stores.
func TestRunReadsEveryTaskOfTheRun(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, `
name: sum
queue: wf
steps:
  - id: start
    kind: start
  - id: double
    kind: double
    needs: [start]
    for_each: input.items
  - id: total
    kind: total
    needs: [double]
`)
		applyYAML(t, c, fmt.Sprintf(sagaYAML, "on_fail"))
		var ran sync.Map
		handlers := sagaHandlers(&ran)
		handlers["start"] = Step(func(ctx context.Context, s StepInput[orderInput]) (int, error) { return 1, nil })
		handlers["double"] = Step(func(ctx context.Context, s StepInput[orderInput]) (json.RawMessage, error) { return s.Item, nil })
		handlers["total"] = Step(func(ctx context.Context, s StepInput[orderInput]) (int, error) { return 3, nil })
		startWorker(t, c, handlers)
		fan, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "sum", Input: json.RawMessage(`{"items":[1,2,3,4]}`)})
		if err != nil {
			t.Fatal(err)
		}
		saga, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "order", Input: json.RawMessage(`{"card":"bad"}`)})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, fan.RunID, workflow.RunSucceeded)
		waitRun(t, c, saga.RunID, workflow.RunCompensated)
		for i, run := range []string{"batch-1", "batch-1", "batch-10", "batch-1", saga.RunID} {
			if _, err := c.Enqueue(ctx, EnqueueParams{Queue: "plain", Kind: "k", Priority: i,
				Attributes: map[string]string{RunAttribute: run, "n": fmt.Sprint(i)}}); err != nil {
				t.Fatal(err)
			}
		}
		var all []*Task
		for after := ""; ; {
			page, err := c.List(ctx, ListParams{AfterID: after, Limit: 100, WithoutPayload: true})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page...)
			if len(page) < 100 {
				break
			}
			after = page[len(page)-1].ID
		}
		for _, runID := range []string{fan.RunID, saga.RunID, "batch-1", "batch-10"} {
			var want []string
			wantCounts := map[State]int{}
			dead := 0
			for _, tk := range all {
				if tk.Attributes[RunAttribute] == runID {
					want = append(want, tk.ID)
					wantCounts[tk.State]++
					if tk.State == StateDead && tk.DLQStatus == DLQOpen {
						dead++
					}
				}
			}
			r, err := c.Run(ctx, runID)
			if err != nil {
				t.Fatal(err)
			}
			for st, n := range r.Counts {
				if n != wantCounts[st] {
					t.Errorf("run %s: %d %s, want %d", runID, n, st, wantCounts[st])
				}
			}
			if r.Total != len(want) || r.DeadLetters != dead {
				t.Errorf("run %s: %d tasks and %d dead letters, want %d and %d", runID, r.Total, r.DeadLetters, len(want), dead)
			}
			listed, err := c.RunTasks(ctx, runID, ListParams{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tk := range listed {
				got = append(got, tk.ID)
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("run %s lists %v, want %v", runID, got, want)
			}
		}
		if r, _ := c.Run(ctx, fan.RunID); r.Total < 6 {
			t.Errorf("the fan-out run has %d tasks, want its 4 items and 2 steps", r.Total)
		}
		if r, _ := c.Run(ctx, saga.RunID); r.Total < 4 || r.DeadLetters != 1 {
			t.Errorf("the compensated run: %d tasks, %d dead letters; want its steps, a compensation, the plain task and charge's dead letter", r.Total, r.DeadLetters)
		}
	})
}
