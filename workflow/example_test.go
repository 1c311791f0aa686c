package workflow_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

func ExampleParse() {
	def, err := workflow.Parse([]byte(`
name: order
rollback: on_fail
steps:
  - {id: reserve, kind: reserve_slot, compensate: undo_reserve}
  - {id: charge, kind: charge_card, needs: [reserve]}
  - {id: undo_reserve, kind: release_slot, compensation: true}
`))
	if err != nil {
		panic(err)
	}
	fmt.Println(def.Name, len(def.Steps), len(def.Hash()))

	_, err = workflow.Parse([]byte(`
name: order
steps:
  - {id: charge, kind: charge_card, needs: [reserv]}
`))
	fmt.Println(err)
	// Output:
	// order 3 64
	// step "charge": needs: unknown step "reserv"
}

// A run of the saga: reserve succeeds, charge dead-letters, the run
// compensates reserve.
func ExampleAdvance() {
	def, err := workflow.New("order").Rollback(workflow.OnFail).
		Step("reserve", "reserve_slot").Compensate("undo_reserve").
		Step("charge", "charge_card").Needs("reserve").
		Step("undo_reserve", "release_slot").Compensation().
		Build()
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := map[string]store.StepRecord{}
	keep := func(p workflow.Plan) store.RunRecord {
		for _, r := range p.Steps {
			rows[fmt.Sprint(r.StepID, r.Item)] = r
		}
		for _, t := range p.Enqueue {
			fmt.Println("enqueue", t.TaskID, t.Kind)
		}
		return p.Run
	}
	all := func() (out []store.StepRecord) {
		for _, r := range rows {
			out = append(out, r)
		}
		return out
	}
	p, _ := workflow.Start(def, store.WorkflowDef{Name: "order", Version: 1}, "r1", json.RawMessage(`{}`), now)
	run := keep(p)
	p, _ = workflow.Advance(def, run, all(), []workflow.Change{{TaskID: "r1.reserve", Outcome: workflow.Succeeded, Result: json.RawMessage(`{"slot":9}`)}}, now)
	run = keep(p)
	p, _ = workflow.Advance(def, run, all(), []workflow.Change{{TaskID: "r1.charge", Outcome: workflow.Dead, Error: "card declined"}}, now)
	run = keep(p)
	fmt.Println(run.State)
	p, _ = workflow.Advance(def, run, all(), []workflow.Change{{TaskID: "r1.undo_reserve", Outcome: workflow.Succeeded}}, now)
	run = keep(p)
	fmt.Println(run.State)
	for _, v := range workflow.View(def, all()) {
		fmt.Println(v.ID, v.State)
	}
	// Output:
	// enqueue r1.reserve reserve_slot
	// enqueue r1.charge charge_card
	// enqueue r1.undo_reserve release_slot
	// compensating
	// compensated
	// reserve succeeded
	// charge failed
	// undo_reserve succeeded
}
