package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/workflow"
)

// runEvents reads the whole run.<id> stream.
func runEvents(t *testing.T, c *Client, stream string) []Event {
	t.Helper()
	var out []Event
	after := ""
	for {
		p, err := c.ReadEvents(context.Background(), ReadEventsParams{Stream: stream, After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Events...)
		if len(p.Events) == 0 || p.Next == "" || p.Next == after {
			return out
		}
		after = p.Next
	}
}

func eventOf(evs []Event, typ string) (Event, map[string]any, bool) {
	for _, e := range evs {
		if e.Type == typ {
			var m map[string]any
			_ = json.Unmarshal(e.Body, &m)
			return e, m, true
		}
	}
	return Event{}, nil, false
}

// TestWorkflowCompleteStepHalted: a run halted on a dead step is
// force-completed: the run goes on and succeeds, the step's successor sees
// the forced result, the dead letter is resolved, and the run's stream and
// the audit stream record who did it and why.
func TestWorkflowCompleteStepHalted(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, fmt.Sprintf(sagaYAML, "manual"))
		var ran sync.Map
		handlers := sagaHandlers(&ran)
		seen := make(chan json.RawMessage, 1)
		handlers["send_receipt"] = Step(func(ctx context.Context, s StepInput[orderInput]) (string, error) {
			seen <- s.Results["charge"]
			return "sent", nil
		})
		startWorker(t, c, handlers)
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "order", Input: json.RawMessage(`{"card":"bad"}`)})
		if err != nil {
			t.Fatal(err)
		}
		charge := stepOf(waitRun(t, c, run.RunID, workflow.RunFailed), "charge")
		// Refused, nothing written: no reason, a bad result, unknowns.
		for _, bad := range []struct {
			p    CompleteStepParams
			want error
		}{
			{CompleteStepParams{RunID: run.RunID, Step: "charge"}, ErrInvalid},
			{CompleteStepParams{RunID: run.RunID, Step: "charge", Reason: "x", Result: json.RawMessage(`{`)}, ErrInvalid},
			{CompleteStepParams{RunID: "nope", Step: "charge", Reason: "x"}, ErrNotFound},
			{CompleteStepParams{RunID: run.RunID, Step: "nope", Reason: "x"}, ErrNotFound},
			{CompleteStepParams{RunID: run.RunID, Step: "reserve", Reason: "x"}, ErrConflict},
		} {
			if _, err := c.CompleteStep(ctx, bad.p); !errors.Is(err, bad.want) {
				t.Errorf("CompleteStep(%+v) = %v, want %v", bad.p, err, bad.want)
			}
		}
		if r, _ := c.WorkflowRun(ctx, run.RunID); r.State != workflow.RunFailed {
			t.Fatalf("a refused force-complete changed the run: %s", r.State)
		}

		r, err := c.CompleteStep(WithActor(ctx, "ops"), CompleteStepParams{RunID: run.RunID, Step: "charge",
			Result: json.RawMessage(`{"charge_id":"manual-1"}`), Reason: "charged by phone"})
		if err != nil {
			t.Fatal(err)
		}
		if r.State != workflow.RunRunning && r.State != workflow.RunSucceeded {
			t.Fatalf("right after: run %s", r.State)
		}
		r = waitRun(t, c, run.RunID, workflow.RunSucceeded)
		if got := string(<-seen); got != `{"charge_id":"manual-1"}` {
			t.Errorf("notify saw charge's result %s", got)
		}
		if s := stepOf(r, "charge"); s.State != workflow.StepSucceeded || string(s.Result) != `{"charge_id":"manual-1"}` {
			t.Errorf("charge: %+v", s)
		}
		task, err := c.Get(ctx, charge.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if task.DLQStatus != DLQResolved {
			t.Errorf("the dead letter is %q, want resolved", task.DLQStatus)
		}
		hist, err := c.Events(ctx, charge.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if e, b, ok := eventOf(hist, "dlq.resolved"); !ok || e.Actor != "ops" || !strings.Contains(fmt.Sprint(b["note"]), "force-completed") {
			t.Errorf("dlq.resolved: %+v %v", e, b)
		}
		// The streams serve an event once every earlier transaction ended.
		var evs []Event
		testwait.For(t, "the run's stream to serve step.force_completed", func() bool {
			evs = runEvents(t, c, "run."+run.RunID)
			_, _, ok := eventOf(evs, workflow.EventStepForceCompleted)
			return ok
		})
		e, b, ok := eventOf(evs, workflow.EventStepForceCompleted)
		if !ok || e.Actor != "ops" || b["reason"] != "charged by phone" || b["step_id"] != "charge" || b["run_id"] != run.RunID || b["item"] != 0.0 {
			t.Errorf("step.force_completed: %+v %v", e, b)
		}
		forced := false
		for _, e := range evs {
			var m map[string]any
			_ = json.Unmarshal(e.Body, &m)
			forced = forced || e.Type == workflow.EventStepSucceeded && m["forced"] == true && m["reason"] == "charged by phone"
		}
		if !forced {
			t.Error("no step.succeeded with forced: true and the reason")
		}
		testwait.For(t, "the audit stream to serve step.force_completed", func() bool {
			_, _, ok := eventOf(runEvents(t, c, "audit"), workflow.EventStepForceCompleted)
			return ok
		})
		// Forcing it again: it succeeded already (the run has ended).
		if _, err := c.CompleteStep(ctx, CompleteStepParams{RunID: run.RunID, Step: "charge", Reason: "again"}); !errors.Is(err, ErrConflict) {
			t.Errorf("forcing a finished run: %v", err)
		}
	})
}

const stuckYAML = `
name: stuck
queue: wf
steps:
  - {id: fetch, kind: fetch}
  - {id: use, kind: use, needs: [fetch]}
`

// TestWorkflowCompleteStepStuck: a step whose handler blocks (and ignores
// its context) is force-completed: the run goes on without it and
// succeeds; the handler's later result, a success or a failure, changes
// nothing.
func TestWorkflowCompleteStepStuck(t *testing.T) {
	t.Parallel()
	for _, late := range []string{"succeeds", "fails"} {
		t.Run(late, func(t *testing.T) {
			t.Parallel()
			forEachWorkflowStore(t, func(t *testing.T, c *Client) {
				ctx := context.Background()
				applyYAML(t, c, stuckYAML)
				started, release := make(chan struct{}), make(chan struct{})
				seen := make(chan json.RawMessage, 1)
				var once sync.Once
				startWorker(t, c, map[string]Handler{
					"fetch": Step(func(ctx context.Context, s StepInput[json.RawMessage]) (string, error) {
						close(started)
						<-release // stuck, deaf to its context
						if late == "fails" {
							return "", Permanent(errors.New("late failure"))
						}
						return "late result", nil
					}),
					"use": Step(func(ctx context.Context, s StepInput[json.RawMessage]) (string, error) {
						seen <- s.Results["fetch"]
						return "used", nil
					}),
				})
				t.Cleanup(func() { once.Do(func() { close(release) }) })
				run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "stuck"})
				if err != nil {
					t.Fatal(err)
				}
				<-started
				if _, err := c.CompleteStep(ctx, CompleteStepParams{RunID: run.RunID, Step: "fetch",
					Result: json.RawMessage(`"by hand"`), Reason: "the upstream hangs"}); err != nil {
					t.Fatal(err)
				}
				r := waitRun(t, c, run.RunID, workflow.RunSucceeded)
				if got := string(<-seen); got != `"by hand"` {
					t.Errorf("use saw %s", got)
				}
				fetch := stepOf(r, "fetch")
				once.Do(func() { close(release) })
				testwait.For(t, "the stuck task to settle", func() bool {
					task, err := c.Get(ctx, fetch.TaskID)
					return err == nil && task.State != StateRunning
				})
				r, err = c.WorkflowRun(ctx, run.RunID)
				if err != nil {
					t.Fatal(err)
				}
				if s := stepOf(r, "fetch"); r.State != workflow.RunSucceeded || s.State != workflow.StepSucceeded || string(s.Result) != `"by hand"` {
					t.Errorf("after the stuck task settled: run %s, fetch %+v", r.State, s)
				}
			})
		})
	}
}
