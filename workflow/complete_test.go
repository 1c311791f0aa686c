package workflow

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow/workflowtest"
)

func (h *harness) force(step string, item int, result, reason string) (Plan, error) {
	h.t.Helper()
	p, err := CompleteStep(h.def, h.run, h.stepRows(), Force{Step: step, Item: item, Result: json.RawMessage(result), Reason: reason}, h.now)
	if err == nil {
		h.apply(p)
	}
	return p, err
}

func (h *harness) mustForce(step string, item int, result, reason string) Plan {
	h.t.Helper()
	p, err := h.force(step, item, result, reason)
	if err != nil {
		h.t.Fatalf("CompleteStep(%s, %d): %v", step, item, err)
	}
	return p
}

func (h *harness) checkHistory() {
	h.t.Helper()
	d, err := workflowtest.DefOf(h.def)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := workflowtest.Check(d, h.history()); err != nil {
		h.t.Fatalf("history: %v\n%v", err, h.eventTypes())
	}
}

// TestCompleteStepHalted: a run halted on a dead step goes on once the
// step is forced: running again, its successors start with the forced
// result, and it ends succeeded.
func TestCompleteStepHalted(t *testing.T) {
	h := start(t, mustDef(t, haltYAML), `{}`)
	h.succeed("run1.a", "")
	h.die("run1.b", "card declined")
	h.succeed("run1.c", `"c"`)
	h.wantState(RunFailed)
	p := h.mustForce("b", 0, `{"paid":true}`, "paid by hand")
	if len(p.Cancel) != 0 {
		t.Fatalf("cancel %v: the dead task is not canceled", p.Cancel)
	}
	h.wantState(RunRunning)
	if h.run.Error != "" {
		t.Fatalf("run error %q", h.run.Error)
	}
	if r := h.wantRow("b", 0, StepSucceeded); string(r.Result) != `{"paid":true}` || r.Error != "" || r.CompletedSeq == 0 {
		t.Fatalf("row %+v", r)
	}
	h.wantPending("run1.d")
	audit := h.eventBody(EventStepForceCompleted, "b")
	if audit["reason"] != "paid by hand" || audit["state"] != "failed" || audit["run_state"] != "running" || audit["task_id"] != "run1.b" {
		t.Fatalf("audit body %v", audit)
	}
	succ := h.lastEventBody(EventStepSucceeded)
	if succ["forced"] != true || succ["reason"] != "paid by hand" || succ["step_id"] != "b" {
		t.Fatalf("step.succeeded body %v", succ)
	}
	h.succeed("run1.d", "")
	if got := h.payload("run1.e")["results"].(map[string]any)["b"]; jsonString(got) != `{"paid":true}` {
		t.Fatalf("e sees b's result %s", jsonString(got))
	}
	h.succeed("run1.e", "")
	h.wantState(RunSucceeded)
	h.checkHistory()
}

// TestCompleteStepStuck: a pending step (its task waits or runs) is
// forced: its task is canceled in the plan, the run goes on without it,
// and the task's later settlement (success or failure) changes nothing.
func TestCompleteStepStuck(t *testing.T) {
	for _, late := range []ChangeOutcome{Succeeded, Dead, Canceled} {
		t.Run(string(late), func(t *testing.T) {
			h := start(t, mustDef(t, linearYAML), `{}`)
			h.succeed("run1.a", `1`)
			h.wantPending("run1.b")
			p := h.mustForce("b", 0, "", "the service hangs")
			if len(p.Cancel) != 1 || p.Cancel[0] != "run1.b" {
				t.Fatalf("cancel %v", p.Cancel)
			}
			if r := h.wantRow("b", 0, StepSucceeded); string(r.Result) != "null" {
				t.Fatalf("result %s", r.Result)
			}
			h.wantPending("run1.c")
			late := h.advance(Change{TaskID: "run1.b", Outcome: late, Result: json.RawMessage(`"late"`), Error: "late"})
			if !late.Empty() {
				t.Fatalf("the stuck task's settlement changed the run: %+v", late)
			}
			if r := h.wantRow("b", 0, StepSucceeded); string(r.Result) != "null" {
				t.Fatalf("result %s after the late settlement", r.Result)
			}
			h.succeed("run1.c", "")
			h.wantState(RunSucceeded)
			h.checkHistory()
		})
	}
}

// TestCompleteStepCompensation: a dead compensation is forced: the
// compensation_failed run compensates again and ends compensated.
func TestCompleteStepCompensation(t *testing.T) {
	h := start(t, mustDef(t, sagaYAML), `{}`)
	h.succeed("run1.reserve", "")
	h.succeed("run1.charge", "")
	h.die("run1.notify", "smtp down")
	h.die("run1.refund_card", "gateway down")
	h.wantState(RunCompensationFailed)
	// The failed step itself cannot be forced while the run rolls back.
	if _, err := h.force("notify", 0, "", "x"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "rolls back") {
		t.Fatalf("forcing the failed step of a rollback: %v", err)
	}
	h.mustForce("refund_card", 0, `"refunded by hand"`, "refunded in the gateway's console")
	h.wantState(RunCompensating)
	if b := h.eventBody(EventStepForceCompleted, "refund_card"); b["compensation_of"] != "charge" {
		t.Fatalf("audit body %v", b)
	}
	h.wantPending("run1.undo_reserve")
	h.succeed("run1.undo_reserve", "")
	h.wantState(RunCompensated)
	h.checkHistory()
}

// TestCompleteStepFanOutItem: one item of a fan-out is forced; the step's
// result lists it.
func TestCompleteStepFanOutItem(t *testing.T) {
	def := mustDef(t, `
name: fan
steps:
  - {id: each, kind: k, for_each: input.xs}
  - {id: sum, kind: k, needs: [each]}
`)
	h := start(t, def, `{"xs":[1,2]}`)
	h.succeed("run1.each.0", `10`)
	h.die("run1.each.1", "boom")
	h.wantState(RunFailed)
	if _, err := h.force("each", 2, "", "x"); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "no item 2") {
		t.Fatalf("unknown item: %v", err)
	}
	h.mustForce("each", 1, `20`, "done by hand")
	h.wantState(RunRunning)
	if got := h.payload("run1.sum")["results"].(map[string]any)["each"]; jsonString(got) != `[10,20]` {
		t.Fatalf("sum sees %s", jsonString(got))
	}
}

// TestCompleteStepRefused: what cannot be forced is refused with an error
// naming why, and nothing is planned.
func TestCompleteStepRefused(t *testing.T) {
	cont := mustDef(t, `
name: cont
steps:
  - {id: a, kind: k}
  - {id: b, kind: k, on_failure: continue}
  - {id: c, kind: k, needs: [a]}
`)
	cases := []struct {
		name    string
		setup   func(t *testing.T) *harness
		step    string
		item    int
		is      error
		message string
	}{
		{"unknown step", func(t *testing.T) *harness { return start(t, mustDef(t, haltYAML), `{}`) }, "zz", 0, store.ErrNotFound, `no step "zz"`},
		{"not started", func(t *testing.T) *harness { return start(t, mustDef(t, haltYAML), `{}`) }, "e", 0, store.ErrNotFound, "has not started"},
		{"unknown item", func(t *testing.T) *harness { return start(t, mustDef(t, haltYAML), `{}`) }, "a", 3, store.ErrNotFound, "no item 3"},
		{"succeeded", func(t *testing.T) *harness {
			h := start(t, mustDef(t, haltYAML), `{}`)
			h.succeed("run1.a", "")
			return h
		}, "a", 0, store.ErrConflict, "succeeded already"},
		{"finished run", func(t *testing.T) *harness {
			h := start(t, mustDef(t, linearYAML), `{}`)
			h.succeed("run1.a", "")
			h.succeed("run1.b", "")
			h.succeed("run1.c", "")
			return h
		}, "c", 0, store.ErrConflict, "has ended"},
		{"canceled with its run", func(t *testing.T) *harness {
			h := start(t, mustDef(t, haltYAML), `{}`)
			h.cancel()
			h.advance(Change{TaskID: "run1.a", Outcome: Canceled, Error: "x"})
			h.wantState(RunCanceled)
			return h
		}, "a", 0, store.ErrConflict, "has ended"},
		{"canceled row of a canceling run", func(t *testing.T) *harness {
			h := start(t, mustDef(t, haltYAML), `{}`)
			h.succeed("run1.a", "")
			h.cancel()
			h.wantState(RunCanceling)
			return h
		}, "d", 0, store.ErrConflict, "canceled with its run"},
		{"handled by continue", func(t *testing.T) *harness {
			h := start(t, cont, `{}`)
			h.die("run1.b", "x")
			return h
		}, "b", 0, store.ErrConflict, "on_failure continue"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := c.setup(t)
			p, err := h.force(c.step, c.item, "", "why")
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.message) {
				t.Fatalf("err = %v, want %v naming %q", err, c.is, c.message)
			}
			if !p.Empty() {
				t.Fatalf("plan %+v", p)
			}
		})
	}
}

// FuzzCompleteStep: whatever names a step, an item and a result, the
// planner answers an error or a plan whose forced row succeeded with a
// JSON result, and never panics.
func FuzzCompleteStep(f *testing.F) {
	f.Add("b", 0, `{"paid":true}`, "why")
	f.Add("d", 0, ``, "")
	f.Add("zz", -1, `{`, "x")
	f.Add("b", 7, "\xff", "\x00")
	f.Fuzz(func(t *testing.T, step string, item int, result, reason string) {
		h := start(t, mustDef(t, haltYAML), `{}`)
		h.succeed("run1.a", "")
		h.die("run1.b", "card declined")
		p, err := CompleteStep(h.def, h.run, h.stepRows(), Force{Step: step, Item: item, Result: json.RawMessage(result), Reason: reason}, h.now)
		if err != nil {
			if !p.Empty() {
				t.Fatalf("an error with a plan: %v %+v", err, p)
			}
			return
		}
		var forced *store.StepRecord
		for i := range p.Steps {
			if r := &p.Steps[i]; r.StepID == step && r.Item == item {
				forced = r
			}
		}
		if forced == nil || forced.State != StepSucceeded || !json.Valid(forced.Result) {
			t.Fatalf("forced row %+v in plan %+v", forced, p.Steps)
		}
	})
}
