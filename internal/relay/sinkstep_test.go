package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/workflow"
)

// A saga step with a sink whose webhook fails twice (503), then accepts:
// the step's handler ran once (its retry policy allows one attempt), the
// run went on, and the message was retried by the sink queue's policy
// until the webhook accepted it, with the step's correlation attributes
// as headers.
func TestSinkStepWebhookRetriedBySinkPolicy(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		c := client(t, db, nil)
		def, err := workflow.Parse([]byte(`
name: order
queue: wf
rollback: on_fail
steps:
  - id: charge
    kind: charge
    retry: {max_attempts: 1}
    compensate: refund
    sink: hook
    sink_topic: charges
    on_sink_fail: continue
  - id: receipt
    kind: receipt
    needs: [charge]
  - id: refund
    kind: refund
    compensation: true
`))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ApplyWorkflow(ctx, def); err != nil {
			t.Fatal(err)
		}
		var charged, receipts atomic.Int32
		w, err := backstop.NewWorker(c, &backstop.WorkerConfig{Queues: map[string]int{"wf": 2}, PollInterval: 20e6, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("charge", backstop.Step(func(ctx context.Context, s backstop.StepInput[json.RawMessage]) (map[string]any, error) {
			charged.Add(1)
			return map[string]any{"charged": 42}, nil
		}))
		w.Handle("receipt", backstop.Step(func(ctx context.Context, s backstop.StepInput[json.RawMessage]) (string, error) {
			receipts.Add(1)
			return "sent", nil
		}))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })

		h, srv := newHook(t, func(_ string, call int) int {
			if call <= 2 {
				return 503
			}
			return 200
		})
		startRelay(t, c, map[string]relay.Sink{"hook": openSink(t, "hook", srv.URL, relay.Options{})})

		run, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "order"})
		if err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the webhook to accept the step's message", func() bool { return len(h.got()) == 1 })
		testwait.For(t, "the run to succeed", func() bool {
			r, err := c.WorkflowRun(ctx, run.RunID)
			return err == nil && r.State == workflow.RunSucceeded
		})
		m := h.got()[0]
		if charged.Load() != 1 || receipts.Load() != 1 {
			t.Fatalf("charge ran %d times, receipt %d; want once each", charged.Load(), receipts.Load())
		}
		step, err := c.Get(ctx, run.RunID+".charge")
		if err != nil || step.Attempt != 1 || step.State != backstop.StateSucceeded {
			t.Fatalf("the step's task: %+v %v, want succeeded at its first attempt", step, err)
		}
		msg := waitState(t, c, m.id, backstop.StateSucceeded)
		if msg.Attempt != 3 || msg.Queue != backstop.SinkQueue("hook") {
			t.Errorf("the message task took %d attempts on %s, want 3 on sink.hook (two 503s, then 200)", msg.Attempt, msg.Queue)
		}
		if string(m.data) != `{"charged":42}` || m.subject != "charges" || m.key != run.RunID {
			t.Errorf("delivered %s to %q with key %q", m.data, m.subject, m.key)
		}
		hd := http.Header(m.headers)
		if hd.Get(relay.AttrHeaderPrefix+"run_id") != run.RunID || hd.Get(relay.AttrHeaderPrefix+"step_id") != "charge" ||
			hd.Get(relay.AttrHeaderPrefix+"workflow") != "order" || hd.Get(relay.AttrHeaderPrefix+"plan_hash") != def.Hash() {
			t.Errorf("headers %v, want the step's attributes", m.headers)
		}
	})
}

// on_sink_fail: halt (the default): the step that needs a sink step waits
// for its message's delivery. A webhook that refuses the message (400)
// dead-letters it at once: the sink step fails with the webhook's answer
// and the run halts, the next step never started, the step's handler ran
// once. Once the webhook accepts, replaying the dead message (same id)
// resumes the run: the message is delivered and the next step runs with
// the step's result.
func TestSinkStepHaltWaitsForDelivery(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		c := client(t, db, nil)
		def, err := workflow.Parse([]byte(`
name: ship
queue: wf
steps:
  - id: charge
    kind: charge
    sink: hook
  - id: receipt
    kind: receipt
    needs: [charge]
`))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ApplyWorkflow(ctx, def); err != nil {
			t.Fatal(err)
		}
		var charged atomic.Int32
		var receipt atomic.Value
		w, err := backstop.NewWorker(c, &backstop.WorkerConfig{Queues: map[string]int{"wf": 2}, PollInterval: 20e6, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("charge", backstop.Step(func(ctx context.Context, s backstop.StepInput[json.RawMessage]) (map[string]any, error) {
			charged.Add(1)
			return map[string]any{"charged": 42}, nil
		}))
		w.Handle("receipt", backstop.Step(func(ctx context.Context, s backstop.StepInput[json.RawMessage]) (string, error) {
			receipt.Store(string(s.Results["charge"]))
			return "sent", nil
		}))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		var accept atomic.Bool
		h, srv := newHook(t, func(string, int) int {
			if accept.Load() {
				return 200
			}
			return 400
		})
		startRelay(t, c, map[string]relay.Sink{"hook": openSink(t, "hook", srv.URL, relay.Options{})})

		run, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "ship"})
		if err != nil {
			t.Fatal(err)
		}
		msgID := run.RunID + ".charge" + workflow.SinkTaskSuffix
		var dead *backstop.Task
		testwait.For(t, "the message to dead-letter", func() bool {
			dead, err = c.Get(ctx, msgID)
			return err == nil && dead.State == backstop.StateDead
		})
		var r *backstop.WorkflowRun
		testwait.For(t, "the run to halt", func() bool {
			r, err = c.WorkflowRun(ctx, run.RunID)
			return err == nil && r.State == workflow.RunFailed
		})
		for _, s := range r.Steps {
			if s.ID == "charge" && (s.State != workflow.StepFailed || !strings.Contains(s.Error, "400")) {
				t.Errorf("charge is %s (%q), want failed with the webhook's answer", s.State, s.Error)
			}
		}
		if _, err := c.Get(ctx, run.RunID+".receipt"); !errors.Is(err, backstop.ErrNotFound) {
			t.Fatalf("receipt was enqueued although the message is dead (%v)", err)
		}
		if dead.Attempt != 1 {
			t.Errorf("the refused message took %d attempts, want 1", dead.Attempt)
		}

		accept.Store(true)
		if _, err := c.Replay(ctx, backstop.ReplayParams{ID: msgID}); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the run to succeed", func() bool {
			r, err = c.WorkflowRun(ctx, run.RunID)
			return err == nil && r.State == workflow.RunSucceeded
		})
		if got := h.got(); len(got) != 1 || got[0].id != msgID || string(got[0].data) != `{"charged":42}` {
			t.Fatalf("the webhook accepted %+v, want the step's result once, id %s", got, msgID)
		}
		if charged.Load() != 1 {
			t.Errorf("charge ran %d times, want once", charged.Load())
		}
		if got, _ := receipt.Load().(string); got != `{"charged":42}` {
			t.Errorf("receipt saw charge's result %q", got)
		}
	})
}

// on_sink_fail: dead_letter: a webhook that refuses the step's message
// (400) makes the step's own task the dead letter, with the webhook's
// answer and the message's reason, in the transaction that dead-letters
// the message, whose own dead letter is resolved (its attempt kept). The
// step fails, the run halts, the next step never started. Replaying the
// step's task (same id) runs its handler again; its new result is a new
// message (<task>.sink.<n>), delivered, and the run goes on with it.
func TestSinkStepDeadLetterReplaysTheStep(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		c := client(t, db, nil)
		def, err := workflow.Parse([]byte(`
name: ship
queue: wf
steps:
  - id: charge
    kind: charge
    sink: hook
    on_sink_fail: dead_letter
  - id: receipt
    kind: receipt
    needs: [charge]
`))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ApplyWorkflow(ctx, def); err != nil {
			t.Fatal(err)
		}
		var charged atomic.Int32
		var receipt atomic.Value
		w, err := backstop.NewWorker(c, &backstop.WorkerConfig{Queues: map[string]int{"wf": 2}, PollInterval: 20e6, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("charge", backstop.Step(func(ctx context.Context, s backstop.StepInput[json.RawMessage]) (map[string]any, error) {
			return map[string]any{"charged": charged.Add(1)}, nil
		}))
		w.Handle("receipt", backstop.Step(func(ctx context.Context, s backstop.StepInput[json.RawMessage]) (string, error) {
			receipt.Store(string(s.Results["charge"]))
			return "sent", nil
		}))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		var accept atomic.Bool
		h, srv := newHook(t, func(string, int) int {
			if accept.Load() {
				return 200
			}
			return 400
		})
		startRelay(t, c, map[string]relay.Sink{"hook": openSink(t, "hook", srv.URL, relay.Options{})})

		run, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "ship"})
		if err != nil {
			t.Fatal(err)
		}
		stepID := run.RunID + ".charge"
		var step *backstop.Task
		testwait.For(t, "the step's task to dead-letter", func() bool {
			step, err = c.Get(ctx, stepID)
			return err == nil && step.State == backstop.StateDead
		})
		if step.DeadReason != backstop.ReasonPermanentError || !strings.Contains(step.LastError, "400") || step.DLQStatus != backstop.DLQOpen {
			t.Errorf("the step's dead letter: %s %q %s, want the message's reason and the webhook's answer, open", step.DeadReason, step.LastError, step.DLQStatus)
		}
		if len(step.Executions) != 1 || step.Executions[0].Outcome != backstop.OutcomeSucceeded {
			t.Errorf("the step's executions %+v, want its handler's one success", step.Executions)
		}
		var r *backstop.WorkflowRun
		testwait.For(t, "the run to halt", func() bool {
			r, err = c.WorkflowRun(ctx, run.RunID)
			return err == nil && r.State == workflow.RunFailed
		})
		msgs, err := c.List(ctx, backstop.ListParams{Queue: backstop.SinkQueue("hook")})
		if err != nil || len(msgs) != 1 {
			t.Fatalf("messages %v %v, want one", msgs, err)
		}
		msg, err := c.Get(ctx, msgs[0].ID)
		if err != nil || msg.ID != stepID+workflow.SinkTaskSuffix+".1" || msg.State != backstop.StateDead || msg.DLQStatus != backstop.DLQResolved ||
			len(msg.Executions) != 1 {
			t.Fatalf("the message %+v %v, want %s.sink.1 dead, resolved, its attempt kept", msg, err, stepID)
		}
		evs, err := c.Events(ctx, stepID)
		if err != nil || !slices.ContainsFunc(evs, func(e backstop.Event) bool {
			return e.Type == "task.dead_lettered" && strings.Contains(string(e.Body), msg.ID) && strings.Contains(string(e.Body), `"reason":"permanent_error"`)
		}) {
			t.Fatalf("the step task's events: %v, want its task.dead_lettered naming the message", err)
		}
		open, err := c.List(ctx, backstop.ListParams{States: []backstop.State{backstop.StateDead}, DLQStatuses: []backstop.DLQStatus{backstop.DLQOpen}})
		if err != nil || len(open) != 1 || open[0].ID != stepID {
			t.Fatalf("open dead letters %v %v, want the step's task only", open, err)
		}
		if _, err := c.Get(ctx, run.RunID+".receipt"); !errors.Is(err, backstop.ErrNotFound) {
			t.Fatalf("receipt was enqueued although the step is dead (%v)", err)
		}

		accept.Store(true)
		if _, err := c.Replay(ctx, backstop.ReplayParams{ID: stepID}); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the run to succeed", func() bool {
			r, err = c.WorkflowRun(ctx, run.RunID)
			return err == nil && r.State == workflow.RunSucceeded
		})
		if charged.Load() != 2 || receipt.Load() != `{"charged":2}` {
			t.Fatalf("charge ran %d times, receipt saw %v; want twice, the new result", charged.Load(), receipt.Load())
		}
		got := h.got()
		if len(got) != 1 || string(got[0].data) != `{"charged":2}` || !strings.HasPrefix(got[0].id, stepID+workflow.SinkTaskSuffix+".") || got[0].id == msg.ID {
			t.Fatalf("delivered %+v, want the new result once under a new message id", got)
		}
	})
}
