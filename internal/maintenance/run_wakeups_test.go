package maintenance_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// TestRunWakeups: a for_each step that runs one item at a time within a
// 10-minute budget, whose first item never settles: before the deadline a
// round wakes nothing; at the deadline a round plans the run again and the
// items not started fail by the budget with nothing of the run having
// settled (the step then waits for its running item), and the wake-up is
// gone.
func TestRunWakeups(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		b := setup(t, db, nil)
		def, err := workflow.Parse([]byte("name: w\nqueue: wf\nsteps:\n  - {id: each, kind: k, for_each: input.xs, concurrency: 1, budget: 10m}\n"))
		if err != nil {
			t.Fatal(err)
		}
		d, _, err := b.s.PutWorkflow(b.ctx, store.WorkflowDef{Name: def.Name, PlanHash: def.Hash(), Definition: def.Canonical()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := workflow.Start(b.e.Limited(def), d, "run-1", json.RawMessage(`{"xs":[1,2,3]}`), b.e.Now())
		if err != nil {
			t.Fatal(err)
		}
		var eff engine.RunEffects
		if err := b.s.InTx(b.ctx, func(tx store.Tx) error { return b.e.ApplyPlan(b.ctx, tx, plan, true, &eff) }); err != nil {
			t.Fatal(err)
		}
		b.claim("wf", 1, time.Hour) // item 0 runs, and runs on
		svc := maintenance.NewRunWakeups(b.e, time.Second)
		items := func() map[int]store.StepRecord {
			_, steps, err := b.s.GetRun(b.ctx, "run-1")
			if err != nil {
				t.Fatal(err)
			}
			out := map[int]store.StepRecord{}
			for _, s := range steps {
				out[s.Item] = s
			}
			return out
		}

		b.clock.Advance(9 * time.Minute)
		b.run(svc)
		if due, err := b.s.RunsToWake(b.ctx, b.clock.Now(), 10); err != nil || len(due) != 0 {
			t.Fatalf("runs due before the deadline: %v %v", due, err)
		}
		for i, s := range items() {
			if i > 0 && s.State != workflow.StepWaiting {
				t.Fatalf("before the deadline item %d is %s, want waiting", i, s.State)
			}
		}

		b.clock.Advance(time.Minute)
		if due, err := b.s.RunsToWake(b.ctx, b.clock.Now(), 10); err != nil || len(due) != 1 || due[0] != "run-1" {
			t.Fatalf("runs due at the deadline: %v %v, want run-1", due, err)
		}
		b.run(svc)
		got := items()
		if got[0].State != workflow.StepPending {
			t.Errorf("the running item is %s, want pending", got[0].State)
		}
		for _, i := range []int{1, 2} {
			if got[i].State != workflow.StepFailed || !strings.Contains(got[i].Error, "budget") {
				t.Errorf("item %d after the deadline: %s %q, want failed by the budget", i, got[i].State, got[i].Error)
			}
		}
		if due, err := b.s.RunsToWake(b.ctx, b.clock.Now().Add(time.Hour), 10); err != nil || len(due) != 0 {
			t.Errorf("wake-ups left after the round: %v %v", due, err)
		}
	})
}
