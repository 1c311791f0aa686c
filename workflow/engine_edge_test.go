package workflow

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
)

// TestStepTaskCanceled: a step's task canceled on its own (not with its
// run) is a failure under the step's policy; replaying it resumes the run.
func TestStepTaskCanceled(t *testing.T) {
	h := start(t, mustDef(t, linearYAML), `{}`)
	h.advance(Change{TaskID: "run1.a", Outcome: Canceled})
	h.wantRow("a", 0, StepCanceled)
	h.wantState(RunFailed)
	h.resume("run1.a")
	h.wantPending("run1.a")
	h.succeed("run1.a", "")
	h.wantPending("run1.b")
}

// TestBatchOfChanges: several settlements in one Advance (the glue batches
// them) decide as one.
func TestBatchOfChanges(t *testing.T) {
	h := start(t, mustDef(t, haltYAML), `{}`)
	h.succeed("run1.a", "")
	h.advance(Change{TaskID: "run1.b", Outcome: Succeeded}, Change{TaskID: "run1.c", Outcome: Succeeded})
	h.wantPending("run1.d")
	if h.run.Seq != 3 {
		t.Fatalf("seq %d", h.run.Seq)
	}
}

// TestFanOutItemRoutes: a fan-out item's failure routes with that item's
// payload; the route target runs once however many items fail.
func TestFanOutItemRoutes(t *testing.T) {
	h := start(t, mustDef(t, `
name: fr
steps:
  - {id: f, kind: k, for_each: input.xs, on_failure: 'route:r'}
  - {id: r, kind: k}
`), `{"xs":["p","q"]}`)
	h.die("run1.f.1", "bad q")
	h.wantPending("run1.f.0", "run1.r")
	got := jsonString(h.payload("run1.r")["failure"])
	if want := `{"error":"bad q","input":{"index":1,"input":{"xs":["p","q"]},"item":"q","results":{}},"step":"f"}`; got != want {
		t.Fatalf("failure %s, want %s", got, want)
	}
	h.die("run1.f.0", "bad p")
	h.succeed("run1.r", "")
	h.wantState(RunSucceeded)
}

// TestHaltedFanOutOnFail: an item dies; the rollback waits for the item
// still running, then the items that succeeded, before or after, are each
// compensated, the one completed last first.
func TestHaltedFanOutOnFail(t *testing.T) {
	h := start(t, mustDef(t, `
name: fo
rollback: on_fail
steps:
  - {id: f, kind: k, for_each: input.xs, compensate: u}
  - {id: u, kind: k, compensation: true}
`), `{"xs":[1,2,3]}`)
	h.succeed("run1.f.0", `"r0"`)
	h.die("run1.f.1", "x")
	h.wantState(RunCompensating)
	h.wantPending("run1.f.2") // nothing is undone while an item runs
	h.succeed("run1.f.2", "")
	h.wantPending("run1.u.2") // the item completed last first
	h.succeed("run1.u.2", "")
	h.wantPending("run1.u.0")
	if got := jsonString(h.payload("run1.u.0")["compensating"]); got != `{"item":0,"result":"r0","step":"f"}` {
		t.Fatalf("compensating %s", got)
	}
	h.succeed("run1.u.0", "")
	h.wantState(RunCompensated)
	if _, ok := h.tasks["run1.u.1"]; ok {
		t.Fatal("the dead item was compensated")
	}
}

// TestWrongDefinition: a definition that is not the run's version is
// refused.
func TestWrongDefinition(t *testing.T) {
	h := start(t, mustDef(t, linearYAML), `{}`)
	other := mustDef(t, strings.Replace(linearYAML, "kind: kc", "kind: kc2", 1))
	if _, err := Advance(other, h.run, h.stepRows(), nil, frozen); err == nil {
		t.Fatal("Advance accepted another version")
	}
	if _, err := Cancel(other, h.run, h.stepRows(), frozen); err == nil {
		t.Fatal("Cancel accepted another version")
	}
}

// TestUnvalidatedDefinition: the engine compiles the expressions of a
// definition built by hand, and refuses an invalid one.
func TestUnvalidatedDefinition(t *testing.T) {
	def := &Definition{Name: "w", Steps: []Step{{ID: "a", Kind: "k", ForEach: "input.xs"}}}
	p, err := Start(def, store.WorkflowDef{}, "r1", json.RawMessage(`{"xs":[1]}`), frozen)
	if err != nil || len(p.Enqueue) != 1 || p.Enqueue[0].TaskID != "r1.a.0" {
		t.Fatalf("plan %+v err %v", p, err)
	}
	bad := &Definition{Name: "w", Steps: []Step{{ID: "a", Kind: "k", Needs: []string{"a"}}}}
	if _, err := Start(bad, store.WorkflowDef{}, "r1", nil, frozen); err == nil {
		t.Fatal("started an invalid definition")
	}
}

// TestResultNotJSON: a handler's result that is not JSON is kept as a
// JSON string.
func TestResultNotJSON(t *testing.T) {
	h := start(t, mustDef(t, linearYAML), `{}`)
	h.succeed("run1.a", `not json`)
	if got := jsonString(h.payload("run1.b")["results"]); got != `{"a":"not json"}` {
		t.Fatalf("results %s", got)
	}
}

// TestView: every step of the definition, waiting ones included, with an
// aggregate state over its items.
func TestView(t *testing.T) {
	h := start(t, mustDef(t, fanYAML), `{"emails":["x","y"]}`)
	h.succeed("run1.a", "")
	h.succeed("run1.notify.0", "")
	var got []string
	for _, v := range View(h.def, h.stepRows()) {
		got = append(got, fmt.Sprintf("%s=%s/%d", v.ID, v.State, len(v.Rows)))
	}
	if want := "a=succeeded/1 notify=pending/2 z=waiting/0"; strings.Join(got, " ") != want {
		t.Fatalf("view %v, want %s", got, want)
	}
	h.die("run1.notify.1", "x")
	h.cancel() // nothing pending: the run is failed, canceling it cancels z
	got = got[:0]
	for _, v := range View(h.def, h.stepRows()) {
		got = append(got, fmt.Sprintf("%s=%s", v.ID, v.State))
	}
	if want := "a=succeeded notify=failed z=canceled"; strings.Join(got, " ") != want {
		t.Fatalf("view %v, want %s", got, want)
	}
}

func TestStatePredicates(t *testing.T) {
	all := []store.RunState{RunRunning, RunFailed, RunCompensating, RunCompensated, RunCompensationFailed, RunSucceeded, RunPartial, RunCanceled, RunCanceling}
	for _, s := range all {
		if !ValidRunState(s) {
			t.Errorf("%s not valid", s)
		}
		fin := s == RunSucceeded || s == RunPartial || s == RunCompensated || s == RunCanceled
		if Finished(s) != fin {
			t.Errorf("Finished(%s) = %v", s, Finished(s))
		}
		if Terminal(s) != (s != RunRunning && s != RunCompensating && s != RunCanceling) {
			t.Errorf("Terminal(%s)", s)
		}
	}
	if ValidRunState("waiting") || ValidRunState("") {
		t.Error("unknown state valid")
	}
	if ValidName("a.b") == nil || ValidName("order-1") != nil {
		t.Error("ValidName")
	}
}
