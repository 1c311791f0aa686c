package workflow

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

const linearYAML = `
name: lin
queue: q
steps:
  - {id: a, kind: ka, retry: {max_attempts: 3, schedule: [1s, 5s]}, timeout: 30s, priority: 2}
  - {id: b, kind: kb, needs: [a], queue: other}
  - {id: c, kind: kc, needs: [b]}
`

func TestLinearSuccess(t *testing.T) {
	h := start(t, mustDef(t, linearYAML), `{"order":7}`)
	h.wantState(RunRunning)
	h.wantPending("run1.a")
	ta := h.tasks["run1.a"]
	wantAttrs := map[string]string{"run_id": "run1", "workflow": "lin", "step_id": "a", "plan_hash": h.def.Hash()}
	if ta.Kind != "ka" || ta.Queue != "q" || ta.MaxAttempts != 3 || ta.Retry == nil || len(ta.Retry.Schedule) != 2 ||
		ta.Timeout != 30*time.Second || ta.Priority != 2 || jsonString(ta.Attributes) != jsonString(wantAttrs) {
		t.Fatalf("task a = %+v", ta)
	}
	if got := string(ta.Payload); got != `{"input":{"order":7},"results":{}}` {
		t.Fatalf("payload of a = %s", got)
	}
	if h.run.PlanHash != h.def.Hash() || h.run.Version != 1 || h.run.Workflow != "lin" || !h.run.CreatedAt.Equal(frozen) {
		t.Fatalf("run = %+v", h.run)
	}

	h.succeed("run1.a", `{"slot":3}`)
	h.wantPending("run1.b")
	if tb := h.tasks["run1.b"]; tb.Queue != "other" || tb.MaxAttempts != 0 || tb.Retry != nil {
		t.Fatalf("task b = %+v", tb)
	}
	if got := string(h.tasks["run1.b"].Payload); got != `{"input":{"order":7},"results":{"a":{"slot":3}}}` {
		t.Fatalf("payload of b = %s", got)
	}
	if r := h.wantRow("a", 0, StepSucceeded); r.CompletedSeq != 1 || string(r.Result) != `{"slot":3}` {
		t.Fatalf("row a = %+v", r)
	}
	h.wantRow("c", 0, StepWaiting)
	h.succeed("run1.b", "")
	h.succeed("run1.c", `"done"`)
	h.wantState(RunSucceeded)
	if h.run.Seq != 3 || string(h.wantRow("b", 0, StepSucceeded).Result) != "null" {
		t.Fatalf("run %+v", h.run)
	}
	want := []string{"run.started", "step.enqueued", "step.succeeded", "step.enqueued", "step.succeeded", "step.enqueued", "step.succeeded", "run.finished"}
	if got := h.eventTypes(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if b := h.lastEventBody(EventRunFinished); b["state"] != "succeeded" || b["run_id"] != "run1" {
		t.Fatalf("run.finished body %v", b)
	}
}

// TestIdempotence: a change for a row that is not pending (applied
// already, or settled otherwise) or for an unknown task changes nothing.
func TestIdempotence(t *testing.T) {
	h := start(t, mustDef(t, linearYAML), `{}`)
	h.succeed("run1.a", `1`)
	before := h.stepRows()
	for _, c := range []Change{
		{TaskID: "run1.a", Outcome: Succeeded, Result: json.RawMessage(`2`)},
		{TaskID: "run1.a", Outcome: Dead, Error: "late"},
		{TaskID: "run1.zz", Outcome: Succeeded},
		{TaskID: "other-task", Outcome: Dead},
	} {
		p := h.advance(c)
		if !p.Empty() {
			t.Fatalf("change %+v: plan %+v", c, p)
		}
	}
	if jsonString(h.stepRows()) != jsonString(before) || h.run.Seq != 1 {
		t.Fatal("rows changed")
	}
	// Both outcomes in one batch: the first wins.
	h.advance(Change{TaskID: "run1.b", Outcome: Succeeded, Result: json.RawMessage(`"x"`)}, Change{TaskID: "run1.b", Outcome: Dead})
	h.wantRow("b", 0, StepSucceeded)
	h.wantPending("run1.c")
}

const fanYAML = `
name: fan
steps:
  - {id: a, kind: k}
  - {id: notify, kind: send, needs: [a], for_each: input.emails}
  - {id: z, kind: k, needs: [notify]}
`

func TestFanOutFanIn(t *testing.T) {
	h := start(t, mustDef(t, fanYAML), `{"emails":["x@a","y@a","z@a"]}`)
	h.succeed("run1.a", `{"n":1}`)
	h.wantPending("run1.notify.0", "run1.notify.1", "run1.notify.2")
	p1 := h.payload("run1.notify.1")
	if p1["item"] != "y@a" || p1["index"] != float64(1) || jsonString(p1["results"]) != `{"a":{"n":1}}` {
		t.Fatalf("item payload %v", p1)
	}
	if a := h.tasks["run1.notify.2"].Attributes; a["step_item"] != "2" || a["step_id"] != "notify" {
		t.Fatalf("attributes %v", a)
	}
	// Out of order; z waits for all of them.
	h.succeed("run1.notify.2", `"r2"`)
	h.succeed("run1.notify.0", `"r0"`)
	h.wantPending("run1.notify.1")
	h.succeed("run1.notify.1", `"r1"`)
	h.wantPending("run1.z")
	if got := jsonString(h.payload("run1.z")["results"]); got != `{"notify":["r0","r1","r2"]}` {
		t.Fatalf("fan-in results %s", got)
	}
	h.succeed("run1.z", "")
	h.wantState(RunSucceeded)
}

func TestFanOutNoItems(t *testing.T) {
	h := start(t, mustDef(t, fanYAML), `{"emails":[]}`)
	h.succeed("run1.a", ``)
	r := h.wantRow("notify", 0, StepSucceeded)
	if string(r.Result) != "[]" || r.TaskID != "" {
		t.Fatalf("empty fan-out row %+v", r)
	}
	h.wantPending("run1.z")
	if got := jsonString(h.payload("run1.z")["results"]); got != `{"notify":[]}` {
		t.Fatalf("results %s", got)
	}
	h.succeed("run1.z", "")
	h.wantState(RunSucceeded)
}

const whenYAML = `
name: when
steps:
  - {id: a, kind: k}
  - {id: b, kind: k, needs: [a], when: 'results.a.ok && input.go'}
  - {id: c, kind: k, needs: [b]}
  - {id: d, kind: k, needs: [c]}
  - {id: e, kind: k, needs: [a]}
`

func TestWhenFalseSkipsAndPropagates(t *testing.T) {
	h := start(t, mustDef(t, whenYAML), `{"go":false}`)
	h.succeed("run1.a", `{"ok":true}`)
	h.wantRow("b", 0, StepSkipped)
	h.wantRow("c", 0, StepSkipped)
	h.wantRow("d", 0, StepSkipped)
	h.wantPending("run1.e")
	if !h.hasEvent(EventStepSkipped, "d") {
		t.Fatal("no step.skipped for d")
	}
	h.succeed("run1.e", "")
	h.wantState(RunSucceeded) // skipped by when is not a failure

	if b := h.eventBody(EventStepSkipped, "b"); b["when"] != false || b["workflow"] != "when" {
		t.Fatalf("skip event %v", b)
	}
	if b := h.eventBody(EventStepSkipped, "c"); b["when"] != nil {
		t.Fatalf("skip event %v", b)
	}

	h2 := start(t, mustDef(t, whenYAML), `{"go":true}`)
	h2.succeed("run1.a", `{"ok":true}`)
	h2.wantPending("run1.b", "run1.e")
	if b := h2.eventBody(EventStepEnqueued, "b"); b["when"] != true {
		t.Fatalf("enqueue event %v", b)
	}
}

func TestWhenRuntimeErrorFailsStep(t *testing.T) {
	h := start(t, mustDef(t, "name: w\nsteps:\n- {id: a, kind: k, when: 'input.missing.x == 1'}\n"), `{}`)
	r := h.wantRow("a", 0, StepFailed)
	if !strings.Contains(r.Error, "when:") || r.TaskID != "" {
		t.Fatalf("row %+v", r)
	}
	h.wantState(RunFailed) // halt, rollback manual, nothing pending
	if len(h.tasks) != 0 {
		t.Fatalf("tasks %v", h.enqueued)
	}
	// for_each that is not a list at run time fails the step too.
	h2 := start(t, mustDef(t, "name: w\nsteps:\n- {id: a, kind: k, for_each: input.items, on_failure: continue}\n"), `{"items":"nope"}`)
	if r := h2.wantRow("a", 0, StepFailed); !strings.Contains(r.Error, "not a list") {
		t.Fatalf("row %+v", r)
	}
	h2.wantState(RunPartial)
}

const haltYAML = `
name: h
steps:
  - {id: a, kind: k}
  - {id: b, kind: k, needs: [a]}
  - {id: c, kind: k, needs: [a]}
  - {id: d, kind: k, needs: [c]}
  - {id: e, kind: k, needs: [b, d]}
`

// TestHaltManualFailsThenResumes: b dies under halt while c runs: c's
// success is recorded, d does not start; the run is failed once nothing
// runs. Replaying b resumes the run, which ends succeeded.
func TestHaltManualFailsThenResumes(t *testing.T) {
	h := start(t, mustDef(t, haltYAML), `{}`)
	h.succeed("run1.a", "")
	h.wantPending("run1.b", "run1.c")
	h.die("run1.b", "card declined")
	h.wantState(RunRunning)
	h.wantPending("run1.c")
	h.succeed("run1.c", `"c"`)
	h.wantState(RunFailed)
	h.wantRow("d", 0, StepWaiting)
	if _, started := h.tasks["run1.d"]; started {
		t.Fatal("d started after the halt")
	}
	if !strings.Contains(h.run.Error, "card declined") || !h.hasEvent(EventRunHalted, "b") {
		t.Fatalf("run %+v events %v", h.run, h.eventTypes())
	}
	// Resume of a task that is not a dead row: nothing.
	if p := h.resume("run1.c", "nope"); !p.Empty() {
		t.Fatalf("plan %+v", p)
	}
	h.resume("run1.b")
	h.wantState(RunRunning)
	h.wantPending("run1.b", "run1.d") // no longer halted: d needs only c
	h.wantRow("e", 0, StepWaiting)
	if h.run.Error != "" || !h.hasEvent(EventRunResumed, "") {
		t.Fatalf("run %+v", h.run)
	}
	h.succeed("run1.b", `"b"`)
	h.succeed("run1.d", "")
	h.succeed("run1.e", "")
	h.wantState(RunSucceeded)
	// Resume of a run that ended: an empty plan.
	if p := h.resume("run1.b"); !p.Empty() {
		t.Fatalf("plan %+v", p)
	}
}

// TestReplayBeforeHalt: the dead step is replayed while the run still
// runs (another step is pending): the row is pending again, and the run
// goes on without ever being failed.
func TestReplayBeforeHalt(t *testing.T) {
	h := start(t, mustDef(t, haltYAML), `{}`)
	h.succeed("run1.a", "")
	h.die("run1.b", "x")
	h.resume("run1.b")
	h.wantState(RunRunning)
	h.wantPending("run1.b", "run1.c")
	h.succeed("run1.b", "")
	h.succeed("run1.c", "")
	h.succeed("run1.d", "")
	h.succeed("run1.e", "")
	h.wantState(RunSucceeded)
	if h.hasEvent(EventRunHalted, "") {
		t.Fatal("halted")
	}
}

// TestResumeHandledFailure: a failure handled by continue is not resumed
// (its dependents were skipped already).
func TestResumeHandledFailure(t *testing.T) {
	h := start(t, mustDef(t, continueYAML), `{}`)
	h.succeed("run1.a", "")
	h.die("run1.b", "nope")
	if p := h.resume("run1.b"); !p.Empty() {
		t.Fatalf("plan %+v", p)
	}
}

const sagaYAML = `
name: order
queue: orders
rollback: on_fail
steps:
  - id: reserve
    kind: reserve_slot
    compensate: undo_reserve
  - id: charge
    kind: charge_card
    needs: [reserve]
    compensate: refund_card
  - id: notify
    kind: send_receipt
    needs: [charge]
  - id: undo_reserve
    kind: release_slot
    compensation: true
  - id: refund_card
    kind: refund
    compensation: true
`

// TestSagaCompensates is the saga: reserve succeeds, charge dies,
// undo_reserve runs, refund_card does not (charge never completed).
func TestSagaCompensates(t *testing.T) {
	h := start(t, mustDef(t, sagaYAML), `{"sku":"x"}`)
	h.succeed("run1.reserve", `{"slot":9}`)
	h.die("run1.charge", "declined")
	h.wantState(RunCompensating)
	h.wantPending("run1.undo_reserve")
	task := h.tasks["run1.undo_reserve"]
	if task.Kind != "release_slot" || task.Queue != "orders" || task.Attributes["compensation_of"] != "reserve" || task.Attributes["step_id"] != "undo_reserve" {
		t.Fatalf("compensation task %+v", task)
	}
	if got := string(task.Payload); got != `{"compensating":{"item":0,"result":{"slot":9},"step":"reserve"},"input":{"sku":"x"}}` {
		t.Fatalf("compensation payload %s", got)
	}
	h.succeed("run1.undo_reserve", "")
	h.wantState(RunCompensated)
	if _, ok := h.tasks["run1.refund_card"]; ok {
		t.Fatal("refund_card ran for a charge that never completed")
	}
	if _, ok := h.tasks["run1.notify"]; ok {
		t.Fatal("notify ran after the halt")
	}
	want := []string{"run.started", "step.enqueued", "step.succeeded", "step.enqueued", "step.failed", "run.compensating", "step.enqueued", "step.succeeded", "run.finished"}
	if got := h.eventTypes(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

const sagaParallelYAML = `
name: par
rollback: on_fail
steps:
  - {id: a, kind: k, compensate: ua}
  - {id: b, kind: k, compensate: ub}
  - {id: f, kind: k, compensate: uf, for_each: input.items}
  - {id: x, kind: k, needs: [a, b, f]}
  - {id: slow, kind: k, compensate: us}
  - {id: plain, kind: k}
  - {id: ua, kind: k, compensation: true}
  - {id: ub, kind: k, compensation: true}
  - {id: uf, kind: k, compensation: true}
  - {id: us, kind: k, compensation: true}
`

// TestCompensationOrder: no compensation starts while a step of the run
// still runs (one that succeeds meanwhile is undone too); then they run one
// at a time in reverse order of completion, every fan-out item is
// compensated, and a step without compensate is passed over.
func TestCompensationOrder(t *testing.T) {
	h := start(t, mustDef(t, sagaParallelYAML), `{"items":[10,20]}`)
	h.wantPending("run1.a", "run1.b", "run1.f.0", "run1.f.1", "run1.slow", "run1.plain")
	h.succeed("run1.b", "")     // seq 1
	h.succeed("run1.f.1", "")   // seq 2
	h.succeed("run1.a", "")     // seq 3
	h.succeed("run1.plain", "") // seq 4, nothing to undo
	h.succeed("run1.f.0", "")   // seq 5 -> x enqueued
	h.die("run1.x", "boom")
	h.wantState(RunCompensating)
	h.wantPending("run1.slow") // the rollback waits for it
	h.succeed("run1.slow", "") // seq 6: it succeeded while the run halted
	var order []string
	for len(h.pending()) > 0 {
		if n := len(h.pending()); n > 1 {
			t.Fatalf("more than one compensation at once: %v", h.pending())
		}
		comp := h.pending()[0]
		order = append(order, comp)
		h.succeed(comp, "")
	}
	want := []string{"run1.us", "run1.uf.0", "run1.ua", "run1.uf.1", "run1.ub"}
	if !slices.Equal(order, want) {
		t.Fatalf("compensation order %v, want %v", order, want)
	}
	if p := h.payload("run1.uf.1")["compensating"].(map[string]any); p["step"] != "f" || p["item"] != float64(1) {
		t.Fatalf("payload %v", p)
	}
	if a := h.tasks["run1.uf.1"].Attributes; a["compensation_of"] != "f" {
		t.Fatalf("attributes %v", a)
	}
	h.wantState(RunCompensated)
}

func TestCompensationFailedThenResumed(t *testing.T) {
	h := start(t, mustDef(t, sagaYAML), `{}`)
	h.succeed("run1.reserve", "")
	h.succeed("run1.charge", "")
	h.die("run1.notify", "smtp down")
	h.wantPending("run1.refund_card")
	h.die("run1.refund_card", "gateway down")
	h.wantState(RunCompensationFailed)
	h.wantPending()
	if b := h.lastEventBody(EventRunFinished); b["state"] != "compensation_failed" || !strings.Contains(b["error"].(string), "gateway down") {
		t.Fatalf("body %v", b)
	}
	h.resume("run1.refund_card")
	h.wantState(RunCompensating)
	h.wantPending("run1.refund_card")
	h.succeed("run1.refund_card", "")
	h.wantPending("run1.undo_reserve")
	h.succeed("run1.undo_reserve", "")
	h.wantState(RunCompensated)
}

const continueYAML = `
name: cont
steps:
  - {id: a, kind: k}
  - {id: b, kind: k, needs: [a], on_failure: continue}
  - {id: c, kind: k, needs: [b]}
  - {id: d, kind: k, needs: [a]}
  - {id: e, kind: k, needs: [d]}
`

func TestContinuePartial(t *testing.T) {
	h := start(t, mustDef(t, continueYAML), `{}`)
	h.succeed("run1.a", "")
	h.die("run1.b", "nope")
	h.wantRow("b", 0, StepFailed)
	h.wantRow("c", 0, StepSkipped)
	h.wantPending("run1.d")
	h.succeed("run1.d", "")
	h.succeed("run1.e", "")
	h.wantState(RunPartial)
	if !strings.Contains(h.run.Error, `step "b": nope`) {
		t.Fatalf("error %q", h.run.Error)
	}
}

const routeYAML = `
name: route
steps:
  - {id: a, kind: k}
  - {id: charge, kind: charge, needs: [a], on_failure: 'route:handler'}
  - {id: handler, kind: handle}
  - {id: notify, kind: k, needs: [charge]}
  - {id: after, kind: k, needs: [charge, handler]}
  - {id: other, kind: k, needs: [handler]}
`

func TestRouteFailure(t *testing.T) {
	h := start(t, mustDef(t, routeYAML), `{"x":1}`)
	h.wantPending("run1.a") // a route target never starts on its own
	h.succeed("run1.a", `"A"`)
	h.die("run1.charge", "declined")
	h.wantRow("charge", 0, StepFailed)
	h.wantRow("notify", 0, StepSkipped)
	h.wantPending("run1.handler")
	p := h.payload("run1.handler")
	want := `{"error":"declined","input":{"input":{"x":1},"results":{"a":"A"}},"step":"charge"}`
	if got := jsonString(p["failure"]); got != want {
		t.Fatalf("failure %s, want %s", got, want)
	}
	h.wantRow("after", 0, StepWaiting)
	h.succeed("run1.handler", `"handled"`)
	h.wantPending("run1.after", "run1.other")
	if got := jsonString(h.payload("run1.after")["results"]); got != `{"charge":null,"handler":"handled"}` {
		t.Fatalf("results %s", got)
	}
	h.succeed("run1.after", "")
	h.succeed("run1.other", "")
	h.wantState(RunSucceeded) // a handled failure
}

func TestRouteNotTaken(t *testing.T) {
	h := start(t, mustDef(t, routeYAML), `{}`)
	h.succeed("run1.a", "")
	h.succeed("run1.charge", "")
	h.wantRow("handler", 0, StepSkipped)
	h.wantPending("run1.notify", "run1.after", "run1.other")
	h.succeed("run1.notify", "")
	h.succeed("run1.after", "")
	h.succeed("run1.other", "")
	h.wantState(RunSucceeded)
}

func TestRouteTargetFails(t *testing.T) {
	h := start(t, mustDef(t, routeYAML), `{}`)
	h.succeed("run1.a", "")
	h.die("run1.charge", "declined")
	h.die("run1.handler", "handler broke")
	h.wantState(RunFailed) // the route target's own policy: halt
	if !strings.Contains(h.run.Error, "handler broke") {
		t.Fatalf("error %q", h.run.Error)
	}
}

// TestCancelManual: a cancel asks the running steps to stop; the run is
// canceling, not canceled, until every one of its step tasks settled.
func TestCancelManual(t *testing.T) {
	h := start(t, mustDef(t, haltYAML), `{}`)
	h.succeed("run1.a", "")
	p := h.cancel()
	if !slices.Equal(p.Cancel, []string{"run1.b", "run1.c"}) {
		t.Fatalf("cancel %v", p.Cancel)
	}
	h.wantState(RunCanceling)
	h.wantPending("run1.b", "run1.c")
	h.wantRow("d", 0, StepCanceled) // never started
	if !h.hasEvent(EventRunCanceled, "") || h.hasEvent(EventRunFinished, "") {
		t.Fatalf("events %v", h.eventTypes())
	}
	// b was waiting: canceled at once; c runs on.
	h.advance(Change{TaskID: "run1.b", Outcome: Canceled, Error: "its run was canceled"})
	h.wantState(RunCanceling)
	if r := h.wantRow("b", 0, StepCanceled); r.Error != CanceledError {
		t.Fatalf("b's error %q", r.Error)
	}
	// Canceling again asks c again, and changes nothing else.
	if p := h.cancel(); !slices.Equal(p.Cancel, []string{"run1.c"}) || h.run.State != RunCanceling {
		t.Fatalf("cancel again: %v, run %s", p.Cancel, h.run.State)
	}
	// c's program stops: the run ends.
	h.advance(Change{TaskID: "run1.c", Outcome: Canceled, Error: "canceled by operator"})
	h.wantState(RunCanceled)
	if h.lastEventBody(EventRunFinished)["state"] != "canceled" {
		t.Fatalf("events %v", h.eventTypes())
	}
	if p := h.cancel(); !p.Empty() {
		t.Fatalf("plan %+v", p)
	}
}

// TestCancelManualStepFinishes: a step that succeeds after the cancel
// (its program ignored it) is recorded; the run still ends canceled.
func TestCancelManualStepFinishes(t *testing.T) {
	h := start(t, mustDef(t, haltYAML), `{}`)
	h.cancel()
	h.wantState(RunCanceling)
	h.succeed("run1.a", "")
	h.wantRow("a", 0, StepSucceeded)
	h.wantState(RunCanceled)
	if _, ok := h.tasks["run1.b"]; ok {
		t.Fatal("a step started after the cancel")
	}
}

// TestCancelOnFail: nothing is undone while a step runs; the steps that
// were waiting are canceled, a running step that finishes anyway is undone
// too, in reverse order of completion; the run ends canceled.
func TestCancelOnFail(t *testing.T) {
	h := start(t, mustDef(t, sagaParallelYAML), `{"items":[]}`)
	h.succeed("run1.a", "")
	h.succeed("run1.b", "")
	p := h.cancel()
	if !slices.Equal(p.Cancel, []string{"run1.plain", "run1.slow", "run1.x"}) { // f had no items: x started
		t.Fatalf("cancel %v", p.Cancel)
	}
	h.wantState(RunCompensating)
	h.wantPending("run1.plain", "run1.slow", "run1.x")
	// A step canceled with its run is not resumed (the glue calls Resume
	// for a settlement of a row that is no longer pending).
	h.advance(Change{TaskID: "run1.x", Outcome: Canceled}, Change{TaskID: "run1.plain", Outcome: Canceled})
	if p := h.resume("run1.x"); !p.Empty() {
		t.Fatalf("resumed a step canceled with its run: %+v", p)
	}
	h.wantPending("run1.slow")
	h.succeed("run1.slow", "") // it ran to the end before it saw the cancel
	h.wantRow("slow", 0, StepSucceeded)
	h.wantPending("run1.us")
	h.succeed("run1.us", "")
	h.wantPending("run1.ub")
	h.succeed("run1.ub", "")
	h.wantPending("run1.ua")
	h.succeed("run1.ua", "")
	h.wantState(RunCanceled)
	if h.run.Error != CanceledError {
		t.Fatalf("error %q", h.run.Error)
	}
}

// TestUndoDependencyOrder: a step is undone only after every succeeded
// step that needed it, even one that completed earlier (a step replayed
// after its dependents ran is the case reverse completion alone gets
// wrong); among independent steps the one completed last goes first.
func TestUndoDependencyOrder(t *testing.T) {
	h := start(t, mustDef(t, `
name: dep
rollback: on_fail
steps:
  - {id: reserve, kind: k, compensate: release}
  - {id: charge, kind: k, needs: [reserve], compensate: refund}
  - {id: check, kind: k, needs: [reserve]}
  - {id: ship, kind: k, needs: [charge], compensate: unship}
  - {id: release, kind: k, compensation: true}
  - {id: refund, kind: k, compensation: true}
  - {id: unship, kind: k, compensation: true}
`), `{}`)
	h.succeed("run1.reserve", "")
	h.wantPending("run1.charge", "run1.check")
	h.die("run1.check", "no stock")
	h.wantState(RunCompensating)
	h.wantPending("run1.charge") // charge (3 s) still runs: release waits
	if _, ok := h.tasks["run1.release"]; ok {
		t.Fatal("release started while charge ran")
	}
	h.succeed("run1.charge", "")
	h.wantPending("run1.refund")
	h.succeed("run1.refund", "")
	h.wantPending("run1.release")
	h.succeed("run1.release", "")
	h.wantState(RunCompensated)

	// The rule itself: rows whose completion order contradicts their
	// dependencies are still undone dependents first.
	e := newEngine(h.def, nil, h.run, []store.StepRecord{
		{RunID: "run1", StepID: "reserve", TaskID: "run1.reserve", State: StepSucceeded, CompletedSeq: 9},
		{RunID: "run1", StepID: "charge", TaskID: "run1.charge", State: StepSucceeded, CompletedSeq: 2},
		{RunID: "run1", StepID: "ship", TaskID: "run1.ship", State: StepSucceeded, CompletedSeq: 1},
	}, frozen)
	var order []string
	for r := e.nextToUndo(); r != nil; r = e.nextToUndo() {
		order = append(order, r.StepID)
		e.put(&store.StepRecord{StepID: e.byID[r.StepID].Compensate, TaskID: "x." + r.StepID, State: StepSucceeded, CompensationOf: r.StepID})
	}
	if want := []string{"ship", "charge", "reserve"}; !slices.Equal(order, want) {
		t.Fatalf("undo order %v, want %v", order, want)
	}
}

func TestStartRefuses(t *testing.T) {
	def := mustDef(t, linearYAML)
	for _, tc := range []struct {
		name, runID, input string
		d                  store.WorkflowDef
		want               string
	}{
		{"bad run id", "a.b", `{}`, store.WorkflowDef{}, "run id"},
		{"run id too long for task ids", strings.Repeat("r", 64) + "", `{}`, store.WorkflowDef{}, ""},
		{"bad input", "r1", `{`, store.WorkflowDef{}, "not valid JSON"},
		{"hash mismatch", "r1", `{}`, store.WorkflowDef{Name: "lin", PlanHash: "abc"}, "plan hash"},
		{"name mismatch", "r1", `{}`, store.WorkflowDef{Name: "other"}, "named"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(def, tc.d, tc.runID, json.RawMessage(tc.input), frozen)
			if tc.want == "" {
				if err != nil { // 64 + 1 + 1: fits
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	long := mustDef(t, "name: w\nsteps:\n- {id: "+strings.Repeat("s", 64)+", kind: k, for_each: '[1]'}\n")
	if _, err := Start(long, store.WorkflowDef{}, strings.Repeat("r", 64), nil, frozen); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("err = %v", err)
	}
}

// TestStartAllSkipped: a run whose every step is skipped by when ends at
// once.
func TestStartAllSkipped(t *testing.T) {
	h := start(t, mustDef(t, "name: w\nsteps:\n- {id: a, kind: k, when: 'false'}\n- {id: b, kind: k, needs: [a]}\n"), ``)
	h.wantState(RunSucceeded)
	if string(h.run.Input) != "null" {
		t.Fatalf("input %s", h.run.Input)
	}
}
