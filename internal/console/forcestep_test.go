package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/workflow"
)

// A run's page lets an admin force a dead step to succeeded with a result
// and a reason: the halted run goes on and succeeds, the next step sees
// the result; a result that is not JSON is refused on the page, nothing
// sent; an operator is not offered the form.
func TestBrowserForceStep(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		ctx0 := context.Background()
		def, err := workflow.Parse([]byte(`name: fx
queue: fx
steps:
  - {id: reserve, kind: reserve}
  - {id: charge, kind: charge, needs: [reserve]}
  - {id: notify, kind: notify, needs: [charge]}
`))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.lib.ApplyWorkflow(ctx0, def); err != nil {
			t.Fatal(err)
		}
		seen := make(chan string, 1)
		w, err := backstop.NewWorker(e.lib, &backstop.WorkerConfig{Queues: map[string]int{"fx": 2}, PollInterval: 10 * time.Millisecond,
			MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("reserve", backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return nil }))
		w.Handle("charge", backstop.HandlerFunc(func(context.Context, *backstop.Task) error {
			return backstop.Permanent(errors.New("card declined"))
		}))
		w.Handle("notify", backstop.Step(func(_ context.Context, s backstop.StepInput[json.RawMessage]) (string, error) {
			seen <- string(s.Results["charge"])
			return "sent", nil
		}))
		if err := w.Start(ctx0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		r, err := e.lib.RunWorkflow(ctx0, backstop.RunWorkflowParams{Workflow: "fx"})
		if err != nil {
			t.Fatal(err)
		}
		id := r.RunID
		testwait.For(t, fmt.Sprintf("run %s to halt", id), func() bool {
			wr, err := e.lib.WorkflowRun(ctx0, id)
			return err == nil && wr.State == workflow.RunFailed
		})

		ctxO := browser(t)
		e.signIn(t, ctxO, api.RoleOperator)
		run(t, ctxO, "open the halted run as an operator", nav(e.url+"/#/runs/"+id), visible("#run-cancel"))
		if n := count(t, ctxO, "#run-force"); n != 0 {
			t.Fatal("an operator is offered to force a step")
		}

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)
		run(t, ctx, "open the halted run", nav(e.url+"/#/runs/"+id), visible("#run-force-start"))
		if opts := text(t, ctx, "#run-force-step"); !contains(opts, "charge (failed)") || contains(opts, "reserve") {
			t.Fatalf("the steps offered: %q", opts)
		}
		run(t, ctx, "a result that is not JSON", keys("#run-force-result", "{nope"), keys("#run-force-reason", "charged by phone"),
			click("#run-force-start"), poll(`document.querySelector("#run-force-error").textContent.includes("not JSON")`))
		if wr, _ := e.lib.WorkflowRun(ctx0, id); wr.State != workflow.RunFailed {
			t.Fatalf("a refused force wrote: the run is %s", wr.State)
		}
		screenshot(t, ctx, "run-force-step")
		evalJS[string](t, ctx, "clear the result", `document.querySelector("#run-force-result").value = ""`)
		run(t, ctx, "force charge", keys("#run-force-result", `{"charge_id":"by-phone"}`), click("#run-force-start"),
			poll(`document.querySelector("#run-state") && document.querySelector("#run-state").textContent === "succeeded"`))
		if got := <-seen; got != `{"charge_id":"by-phone"}` {
			t.Fatalf("notify saw %s", got)
		}
		if n := count(t, ctx, "#run-force"); n != 0 {
			t.Fatal("a finished run still offers the form")
		}
	})
}
