package console_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/workflow"
)

// A workflow run's page draws its steps as a graph: one box per step with
// its state (reserve succeeded, charge failed, notify waiting, the two
// compensations waiting in their own row), each linking to its task; a
// viewer follows the failed step's box to its dead task.
func TestBrowserRunGraph(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		ctx0 := context.Background()
		def, err := workflow.Parse([]byte(`name: order
queue: g
steps:
  - {id: reserve, kind: reserve_slot, compensate: undo_reserve}
  - {id: charge, kind: charge_card, needs: [reserve], compensate: refund_card}
  - {id: notify, kind: send_receipt, needs: [charge]}
  - {id: undo_reserve, kind: release_slot, compensation: true}
  - {id: refund_card, kind: refund, compensation: true}
`))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.lib.ApplyWorkflow(ctx0, def); err != nil {
			t.Fatal(err)
		}
		w, err := backstop.NewWorker(e.lib, &backstop.WorkerConfig{Queues: map[string]int{"g": 2}, PollInterval: 10 * time.Millisecond,
			MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("reserve_slot", backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return nil }))
		w.Handle("charge_card", backstop.HandlerFunc(func(context.Context, *backstop.Task) error {
			return backstop.Permanent(errors.New("card declined"))
		}))
		if err := w.Start(ctx0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		r, err := e.lib.RunWorkflow(ctx0, backstop.RunWorkflowParams{Workflow: "order"})
		if err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the run to fail", func() bool {
			wr, err := e.lib.WorkflowRun(ctx0, r.RunID)
			if err != nil {
				t.Fatal(err)
			}
			return wr.State == workflow.RunFailed
		})

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		// The Runs page lists the workflow runs, newest first, each a link.
		run(t, ctx, "the runs list", nav(e.url+"/#/runs"),
			poll(`!!document.querySelector('#runs-list a[href="#/runs/`+r.RunID+`"]')`))
		if l := text(t, ctx, "#runs-list"); !contains(l, "order") || !contains(l, "failed") {
			t.Fatalf("runs list: %q", l)
		}
		run(t, ctx, "open the run", click(`#runs-list a[href="#/runs/`+r.RunID+`"]`),
			poll(`document.querySelectorAll("#run-graph .wf-node").length === 5`))
		got := evalJS[string](t, ctx, "node states", `[...document.querySelectorAll("#run-graph .wf-node")].map((n) => n.dataset.step + "=" + n.dataset.state).join(" ")`)
		if want := "reserve=succeeded charge=failed notify=waiting undo_reserve=waiting refund_card=waiting"; got != want {
			t.Fatalf("graph nodes:\n got %s\nwant %s", got, want)
		}
		if n := evalJS[int](t, ctx, "edges", `document.querySelectorAll("#run-graph .wf-edge").length`); n != 4 {
			t.Fatalf("graph edges: %d, want 4 (2 needs, 2 compensations)", n)
		}
		// The compensations sit in a row of their own, below the steps.
		below := evalJS[bool](t, ctx, "comp row", `(() => {
			const y = (id) => document.querySelector('#run-graph [data-step="' + id + '"] rect').y.baseVal.value;
			return y("undo_reserve") > y("reserve") && y("refund_card") > y("charge") && y("undo_reserve") === y("refund_card"); })()`)
		if !below {
			t.Fatal("the compensations are not in a row of their own under the steps they undo")
		}
		screenshot(t, ctx, "run-graph")
		run(t, ctx, "follow the failed step", click(`#run-graph a[href="#/tasks/`+r.RunID+`.charge"]`),
			poll(`location.hash === "#/tasks/`+r.RunID+`.charge" && !!document.querySelector("#task-state")`))
		if s := text(t, ctx, "#task-state"); !contains(s, "dead") {
			t.Fatalf("the failed step's task page shows %q", s)
		}
	})
}
