package workflow

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestOnWhenErrorTreatAsFalse: a when that fails to evaluate skips its
// step (and the steps that need it) as a false when would, the error kept
// on the row and in the step.skipped event, and the plan lists the step.
func TestOnWhenErrorTreatAsFalse(t *testing.T) {
	def := mustDef(t, `
name: w
steps:
  - {id: a, kind: k, when: 'input.missing.x == 1', on_when_error: treat_as_false}
  - {id: b, kind: k, needs: [a]}
  - {id: c, kind: k}
  - {id: d, kind: k, needs: [c], when: 'results.c.nope', on_when_error: treat_as_false}
`)
	h := start(t, def, `{}`)
	if got := h.last.SkippedOnWhenError; !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Start's SkippedOnWhenError = %v, want [a]", got)
	}
	r := h.wantRow("a", 0, StepSkipped)
	if !strings.Contains(r.Error, "when:") || !strings.Contains(r.Error, "on_when_error: treat_as_false") || r.TaskID != "" {
		t.Fatalf("row %+v", r)
	}
	body := h.eventBody(EventStepSkipped, "a")
	if we, _ := body["when_error"].(string); !strings.Contains(we, "when:") {
		t.Fatalf("skip event %v has no when_error", body)
	}
	if _, ok := body["when"]; ok {
		t.Fatalf("skip event %v says the when evaluated", body)
	}
	h.wantRow("b", 0, StepSkipped)
	if h.eventBody(EventStepSkipped, "b")["when_error"] != nil {
		t.Fatal("b's skip (it needs a) carries a's when error")
	}
	// A when error on a later step: the Advance plan lists it.
	p := h.succeed("run1.c", `{}`)
	if !slices.Equal(p.SkippedOnWhenError, []string{"d"}) {
		t.Fatalf("Advance's SkippedOnWhenError = %v, want [d]", p.SkippedOnWhenError)
	}
	h.wantRow("d", 0, StepSkipped)
	h.wantState(RunSucceeded)
	if len(h.tasks) != 1 {
		t.Fatalf("tasks %v", h.enqueued)
	}
}

// TestOnWhenErrorFail: fail (explicit, or by default) fails the step as
// before; treat_as_false does not cover for_each's errors.
func TestOnWhenErrorFail(t *testing.T) {
	for _, doc := range []string{
		"name: w\nsteps:\n- {id: a, kind: k, when: 'input.missing.x == 1', on_failure: continue}\n",
		"name: w\nsteps:\n- {id: a, kind: k, when: 'input.missing.x == 1', on_when_error: fail, on_failure: continue}\n",
		"name: w\nsteps:\n- {id: a, kind: k, when: 'true', on_when_error: treat_as_false, for_each: input.items, on_failure: continue}\n",
	} {
		h := start(t, mustDef(t, doc), `{"items":"nope"}`)
		h.wantRow("a", 0, StepFailed)
		h.wantState(RunPartial)
		if len(h.last.SkippedOnWhenError) != 0 {
			t.Fatalf("%s: SkippedOnWhenError %v", doc, h.last.SkippedOnWhenError)
		}
	}
}

const seqYAML = `
name: seq
steps:
  - id: each
    kind: k
    for_each: input.xs
    concurrency: 1
  - {id: z, kind: k, needs: [each]}
`

// TestForEachSequential: concurrency 1 runs the items one after the other,
// in item order; the others wait (stored, no task); the fan-in waits for
// all of them.
func TestForEachSequential(t *testing.T) {
	h := start(t, mustDef(t, seqYAML), `{"xs":["a","b","c"]}`)
	h.wantPending("run1.each.0")
	for i := 1; i <= 2; i++ {
		if r := h.wantRow("each", i, StepWaiting); r.TaskID != "" || !r.UpdatedAt.Equal(frozen) {
			t.Fatalf("waiting row %+v", r)
		}
	}
	if v := View(h.def, h.stepRows()); v[0].State != StepPending || v[0].Rows[2].State != StepWaiting {
		t.Fatalf("view %+v", v[0])
	}
	if !h.last.WakeAt.IsZero() {
		t.Fatalf("WakeAt %s without a budget", h.last.WakeAt)
	}
	h.succeed("run1.each.0", `"r0"`)
	h.wantPending("run1.each.1")
	if p := h.payload("run1.each.1"); p["item"] != "b" || p["index"] != float64(1) {
		t.Fatalf("item payload %v", p)
	}
	h.succeed("run1.each.1", `"r1"`)
	h.wantPending("run1.each.2")
	h.succeed("run1.each.2", `"r2"`)
	h.wantPending("run1.z")
	if got := jsonString(h.payload("run1.z")["results"]); got != `{"each":["r0","r1","r2"]}` {
		t.Fatalf("fan-in results %s", got)
	}
	h.succeed("run1.z", "")
	h.wantState(RunSucceeded)
	if !slices.Equal(h.enqueued, []string{"run1.each.0", "run1.each.1", "run1.each.2", "run1.z"}) {
		t.Fatalf("enqueued %v", h.enqueued)
	}
}

// TestForEachConcurrency: at most N items pending; the next item starts
// when any settles; fewer items than N all start.
func TestForEachConcurrency(t *testing.T) {
	def := mustDef(t, strings.Replace(seqYAML, "concurrency: 1", "concurrency: 2", 1))
	h := start(t, def, `{"xs":[1,2,3,4,5]}`)
	h.wantPending("run1.each.0", "run1.each.1")
	h.succeed("run1.each.1", `1`)
	h.wantPending("run1.each.0", "run1.each.2")
	h.succeed("run1.each.2", `2`)
	h.wantPending("run1.each.0", "run1.each.3")
	h.succeed("run1.each.0", `0`)
	h.wantPending("run1.each.3", "run1.each.4")
	h.succeed("run1.each.4", `4`)
	h.wantPending("run1.each.3")
	h.succeed("run1.each.3", `3`)
	h.wantPending("run1.z")

	h2 := start(t, def, `{"xs":[1]}`)
	h2.wantPending("run1.each.0")
	if len(h2.rows) != 1 {
		t.Fatalf("rows %v", h2.stepRows())
	}
}

// TestForEachConcurrencyFailure: an item that fails stops the items not
// started: under continue they are skipped and the run ends partial;
// under halt they wait, and replaying the dead item resumes them.
func TestForEachConcurrencyFailure(t *testing.T) {
	cont := mustDef(t, strings.Replace(seqYAML, "concurrency: 1", "concurrency: 1\n    on_failure: continue", 1))
	h := start(t, cont, `{"xs":[1,2,3]}`)
	h.die("run1.each.0", "boom")
	for i := 1; i <= 2; i++ {
		if r := h.wantRow("each", i, StepSkipped); r.Error != "not started: item 0 failed" {
			t.Fatalf("row %+v", r)
		}
	}
	h.wantRow("z", 0, StepSkipped)
	h.wantState(RunPartial)

	h2 := start(t, mustDef(t, seqYAML), `{"xs":[1,2,3]}`)
	h2.succeed("run1.each.0", `0`)
	h2.die("run1.each.1", "boom")
	h2.wantState(RunFailed)
	h2.wantRow("each", 2, StepWaiting)
	h2.resume("run1.each.1")
	h2.wantPending("run1.each.1")
	h2.succeed("run1.each.1", `1`)
	h2.wantPending("run1.each.2")
	h2.succeed("run1.each.2", `2`)
	h2.succeed("run1.z", ``)
	h2.wantState(RunSucceeded)
}

// TestForEachConcurrencyCancelAndRollback: a cancel, or a rollback, never
// starts the waiting items: they are canceled.
func TestForEachConcurrencyCancelAndRollback(t *testing.T) {
	h := start(t, mustDef(t, seqYAML), `{"xs":[1,2,3]}`)
	h.cancel()
	if r := h.wantRow("each", 1, StepCanceled); r.Error != CanceledError {
		t.Fatalf("row %+v", r)
	}
	h.advance(Change{TaskID: "run1.each.0", Outcome: Canceled})
	h.wantState(RunCanceled)

	onFail := mustDef(t, `
name: seq
rollback: on_fail
steps:
  - {id: each, kind: k, for_each: input.xs, concurrency: 1, compensate: undo}
  - {id: other, kind: k}
  - {id: undo, kind: k, compensation: true}
`)
	h2 := start(t, onFail, `{"xs":[1,2,3]}`)
	h2.succeed("run1.each.0", `0`)
	h2.die("run1.other", "boom")
	h2.wantState(RunCompensating)
	h2.wantRow("each", 2, StepCanceled)
	h2.wantPending("run1.each.1") // it settles before the rollback
	h2.succeed("run1.each.1", `1`)
	h2.wantPending("run1.undo.1")
	h2.succeed("run1.undo.1", ``)
	h2.succeed("run1.undo.0", ``)
	h2.wantState(RunCompensated)
}

const budgetYAML = `
name: b
steps:
  - id: each
    kind: k
    for_each: input.xs
    concurrency: 1
    budget: 10m
  - {id: z, kind: k, needs: [each]}
`

// TestForEachBudget: the items not started when the budget (from the
// step's start) runs out fail, naming the budget; the step then follows
// its on_failure (halt: the run fails once the running item settled). The
// plans ask for a wake-up at the deadline, and a wake-up before it changes
// nothing.
func TestForEachBudget(t *testing.T) {
	h := start(t, mustDef(t, budgetYAML), `{"xs":[1,2,3]}`)
	deadline := frozen.Add(10 * time.Minute)
	if !h.last.WakeAt.Equal(deadline) {
		t.Fatalf("Start's WakeAt = %s, want %s", h.last.WakeAt, deadline)
	}
	h.now = frozen.Add(4 * time.Minute)
	h.succeed("run1.each.0", `0`)
	h.wantPending("run1.each.1")
	if !h.last.WakeAt.Equal(deadline) {
		t.Fatalf("WakeAt = %s, want %s (counted from the step's start)", h.last.WakeAt, deadline)
	}
	h.now = deadline.Add(-time.Second)
	if p := h.advance(); !p.Empty() {
		t.Fatalf("a wake-up before the deadline changed the run: %+v", p)
	}
	h.now = deadline
	h.advance() // the wake-up
	r := h.wantRow("each", 2, StepFailed)
	if !strings.Contains(r.Error, "budget of 10m0s") || r.TaskID != "" {
		t.Fatalf("row %+v", r)
	}
	if b := h.eventBody(EventStepFailed, "each"); b["budget"] != "10m0s" || b["item"] != float64(2) {
		t.Fatalf("event %v", b)
	}
	if !h.last.WakeAt.IsZero() {
		t.Fatalf("WakeAt %s with nothing waiting", h.last.WakeAt)
	}
	h.wantState(RunRunning) // item 1 runs: the run halts once it settled
	h.succeed("run1.each.1", `1`)
	h.wantState(RunFailed)
	if !strings.Contains(h.run.Error, `step "each"`) || !strings.Contains(h.run.Error, "budget") {
		t.Fatalf("run error %q", h.run.Error)
	}
	h.wantRow("z", 0, StepWaiting)
}

// TestForEachBudgetPolicies: the budget's failure goes by the step's
// on_failure, and is noticed at the next settlement without a wake-up.
func TestForEachBudgetPolicies(t *testing.T) {
	cont := mustDef(t, strings.Replace(budgetYAML, "budget: 10m", "budget: 10m\n    on_failure: continue", 1))
	h := start(t, cont, `{"xs":[1,2,3]}`)
	h.now = frozen.Add(11 * time.Minute)
	h.succeed("run1.each.0", `0`)
	h.wantPending()
	h.wantRow("each", 1, StepFailed)
	h.wantRow("z", 0, StepSkipped)
	h.wantState(RunPartial)

	route := mustDef(t, strings.Replace(budgetYAML, "budget: 10m", "budget: 10m\n    on_failure: 'route:r'", 1)+"  - {id: r, kind: k}\n")
	h2 := start(t, route, `{"xs":[1,2]}`)
	h2.now = frozen.Add(10 * time.Minute)
	h2.succeed("run1.each.0", `0`)
	h2.wantPending("run1.r")
	if f := h2.payload("run1.r")["failure"].(map[string]any); !strings.Contains(f["error"].(string), "budget") {
		t.Fatalf("failure %v", f)
	}
	h2.succeed("run1.r", ``)
	h2.wantState(RunSucceeded)
}

// TestWakeAtEarliestBudget: WakeAt is the earliest deadline among the steps
// whose items wait; none once the run halted (nothing will start).
func TestWakeAtEarliestBudget(t *testing.T) {
	def := mustDef(t, `
name: w
steps:
  - {id: a, kind: k, for_each: input.xs, concurrency: 1, budget: 10m}
  - {id: b, kind: k, for_each: input.xs, concurrency: 1, budget: 5m}
  - {id: c, kind: k}
`)
	h := start(t, def, `{"xs":[1,2]}`)
	if want := frozen.Add(5 * time.Minute); !h.last.WakeAt.Equal(want) {
		t.Fatalf("WakeAt = %s, want b's deadline %s", h.last.WakeAt, want)
	}
	h.now = frozen.Add(time.Minute)
	h.succeed("run1.b.0", `0`)
	h.succeed("run1.b.1", `1`)
	if want := frozen.Add(10 * time.Minute); !h.last.WakeAt.Equal(want) {
		t.Fatalf("WakeAt = %s, want a's deadline %s", h.last.WakeAt, want)
	}
	h.die("run1.c", "boom") // halt: a's waiting item will not start
	if !h.last.WakeAt.IsZero() {
		t.Fatalf("WakeAt %s in a halted run", h.last.WakeAt)
	}
	h.wantRow("a", 1, StepWaiting)
	h.succeed("run1.a.0", `0`)
	h.wantState(RunFailed)
	h.wantRow("a", 1, StepWaiting)
	h.resume("run1.c")
	h.succeed("run1.c", ``)
	h.wantPending("run1.a.1")
	h.succeed("run1.a.1", `1`)
	h.wantState(RunSucceeded)
}
