package console_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// A workflow run's page acts: an admin resumes a halted run from it (its
// dead step replayed), an operator cancels one (its compensations run);
// progress counts steps; each step's result is shown, masked; the steps a
// compensated run never ran say "not run"; a run whose compensation failed
// cannot be canceled, and the page says why (the API's 409); the text in
// the graph's boxes fits them.
func TestBrowserRunActions(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		ctx0 := context.Background()
		// ship halts on a dead step (rollback manual); ship_auto undoes
		// what it did at once (rollback on_fail).
		for _, head := range []string{"name: ship\n", "name: ship_auto\nrollback: on_fail\n"} {
			def, err := workflow.Parse([]byte(head + `queue: ra
steps:
  - {id: reserve, kind: reserve_slot, compensate: undo_reserve}
  - {id: charge, kind: charge_card, needs: [reserve]}
  - {id: notify_customer_by_email_and_sms, kind: send_receipt_with_a_long_kind_name, needs: [charge]}
  - {id: undo_reserve, kind: release_slot, compensation: true}
`))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.lib.ApplyWorkflow(ctx0, def); err != nil {
				t.Fatal(err)
			}
		}
		var chargeOK atomic.Bool
		var undoFails sync.Map // run ids whose compensation fails for good
		w, err := backstop.NewWorker(e.lib, &backstop.WorkerConfig{Queues: map[string]int{"ra": 2}, PollInterval: 10 * time.Millisecond,
			MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("reserve_slot", backstop.HandlerFunc(func(ctx context.Context, _ *backstop.Task) error {
			return backstop.SetResult(ctx, map[string]any{"slot": 7, "secret": "hunter2"})
		}))
		w.Handle("charge_card", backstop.HandlerFunc(func(context.Context, *backstop.Task) error {
			if chargeOK.Load() {
				return nil
			}
			return backstop.Permanent(errors.New("card declined"))
		}))
		w.Handle("send_receipt_with_a_long_kind_name", backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return nil }))
		w.Handle("release_slot", backstop.HandlerFunc(func(_ context.Context, tk *backstop.Task) error {
			if _, ok := undoFails.Load(tk.Attributes["run_id"]); ok {
				return backstop.Permanent(errors.New("slot service gone"))
			}
			return nil
		}))
		if err := w.Start(ctx0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		start := func(wf string) string {
			r, err := e.lib.RunWorkflow(ctx0, backstop.RunWorkflowParams{Workflow: wf})
			if err != nil {
				t.Fatal(err)
			}
			return r.RunID
		}
		waitRun := func(id string, want store.RunState) {
			t.Helper()
			testwait.For(t, fmt.Sprintf("run %s to be %s", id, want), func() bool {
				wr, err := e.lib.WorkflowRun(ctx0, id)
				if err != nil {
					t.Fatal(err)
				}
				return wr.State == want
			})
		}
		a, b := start("ship"), start("ship")
		c := start("ship_auto")
		undoFails.Store(c, true)
		d := start("ship_auto")
		for _, id := range []string{a, b} {
			waitRun(id, workflow.RunFailed)
		}
		waitRun(c, workflow.RunCompensationFailed)
		waitRun(d, workflow.RunCompensated)

		// The halted run, as an admin: 1 of 3 steps done (the compensation
		// is no step of the progress), the reservation's result masked.
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)
		run(t, ctx, "open the halted run", nav(e.url+"/#/runs/"+a), visible("#run-resume-start"))
		if p := text(t, ctx, "#run-progress-text"); p != "1 of 3 steps done" {
			t.Fatalf("progress: %q, want 1 of 3 steps done", p)
		}
		res := text(t, ctx, `#run-steps details.result[data-step="reserve"] pre`)
		if !contains(res, `"slot": 7`) || contains(res, "hunter2") {
			t.Fatalf("the reservation's result (masked): %q", res)
		}
		if n := count(t, ctx, `#run-steps details.result[data-step="reserve"] button.copy`); n != 1 {
			t.Fatal("the result has no copy button")
		}
		// Every label in the graph fits its box (168 wide, 10 of margin).
		widest := evalJS[float64](t, ctx, "label widths", `Math.max(...[...document.querySelectorAll("#run-graph .wf-node text")].map((x) => x.getComputedTextLength()))`)
		if widest > 158 {
			t.Fatalf("a label of the graph is %.0f px wide: past its box", widest)
		}
		screenshot(t, ctx, "run-actions-halted")
		chargeOK.Store(true)
		run(t, ctx, "resume it", keys("#run-resume-why", "card fixed"), click("#run-resume-start"),
			poll(`document.querySelector("#run-state") && document.querySelector("#run-state").textContent === "succeeded"`))
		waitRun(a, workflow.RunSucceeded)
		waitText(t, ctx, "#run-progress-text", "3 of 3 steps done")
		chargeOK.Store(false)

		// Canceled by an operator: the step it never reached is canceled, the
		// compensation it never ran (rollback manual) "not run".
		ctxO := browser(t)
		e.signIn(t, ctxO, api.RoleOperator)
		run(t, ctxO, "open the second halted run", nav(e.url+"/#/runs/"+b), visible("#run-cancel"))
		if n := count(t, ctxO, "#run-resume"); n != 0 {
			t.Fatal("an operator is offered to resume a run")
		}
		run(t, ctxO, "cancel it", click("#run-cancel"))
		waitRun(b, workflow.RunCanceled)
		notRun := func(id, state, want string) {
			t.Helper()
			run(t, ctxO, "open "+state+" run", nav(e.url+"/#/runs/"+id),
				poll(`document.querySelector("#run-state") && document.querySelector("#run-state").textContent === "`+state+`"`))
			got := evalJS[string](t, ctxO, "node states", `[...document.querySelectorAll("#run-graph .wf-node")].map((n) => n.dataset.step + "=" + n.dataset.state).join(" ")`)
			if got != want {
				t.Fatalf("%s run's graph:\n got %s\nwant %s", state, got, want)
			}
			if s := text(t, ctxO, "#run-steps"); !contains(s, "not run") || contains(s, "waiting") { // the table says the same
				t.Fatalf("%s run's steps: %q", state, s)
			}
			if n := count(t, ctxO, "#run-cancel"); n != 0 {
				t.Fatalf("a %s run offers a cancel", state)
			}
		}
		notRun(b, "canceled", "reserve=succeeded charge=failed notify_customer_by_email_and_sms=canceled undo_reserve=not run")
		// Rolled back on its own: the step after the failed one "not run".
		notRun(d, "compensated", "reserve=succeeded charge=failed notify_customer_by_email_and_sms=not run undo_reserve=succeeded")
		screenshot(t, ctxO, "run-compensated")

		// Its compensation dead: the run is compensation_failed; a cancel
		// is refused and the page says why.
		run(t, ctxO, "open the run whose compensation failed", nav(e.url+"/#/runs/"+c), visible("#run-cancel"))
		run(t, ctxO, "cancel it", click("#run-cancel"),
			poll(`document.querySelector("#run-cancel-error").textContent.includes("409")`))
		if msg := text(t, ctxO, "#run-cancel-error"); !contains(msg, "compensation") {
			t.Fatalf("the refusal: %q", msg)
		}
		if st := text(t, ctxO, "#run-state"); st != "compensation_failed" {
			t.Fatalf("after the refused cancel the run is %q", st)
		}
	})
}
