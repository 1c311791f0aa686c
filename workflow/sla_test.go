package workflow

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const slaYAML = `
name: w
sla: 5m
steps:
  - {id: a, kind: k, sla: 30s}
  - {id: b, kind: k, needs: [a], sla: 1m}
`

func (h *harness) count(typ, step string) int {
	n := 0
	for _, e := range h.events {
		if e.Type == typ && e.StepID == step {
			n++
		}
	}
	return n
}

// TestSLAMissedOnceAtDeadline: the plans ask for a wake-up at the next SLA
// deadline; the wake-up at a step's deadline records step.sla_missed, the
// one at the run's run.sla_missed, each once: later plans (a wake-up
// again, the late step's settlement, the run's end) do not repeat them. A
// step that ends within its SLA records nothing.
func TestSLAMissedOnceAtDeadline(t *testing.T) {
	h := start(t, mustDef(t, slaYAML), `{}`)
	if want := frozen.Add(30 * time.Second); !h.last.WakeAt.Equal(want) {
		t.Fatalf("Start's WakeAt = %s, want a's deadline %s", h.last.WakeAt, want)
	}
	h.now = frozen.Add(29 * time.Second)
	if p := h.advance(); !p.Empty() {
		t.Fatalf("a wake-up before the deadline changed the run: %+v", p)
	}
	h.now = frozen.Add(30 * time.Second)
	h.advance() // the wake-up at a's deadline
	if h.count(EventStepSLAMissed, "a") != 1 {
		t.Fatalf("events %v, want one step.sla_missed for a", h.eventTypes())
	}
	if b := h.eventBody(EventStepSLAMissed, "a"); b["sla"] != "30s" || b["deadline"] != "2026-11-24T12:00:30.000000Z" ||
		b["started_at"] != "2026-11-24T12:00:00.000000Z" {
		t.Fatalf("body %v", b)
	}
	if want := frozen.Add(5 * time.Minute); !h.last.WakeAt.Equal(want) {
		t.Fatalf("WakeAt = %s, want the run's deadline %s", h.last.WakeAt, want)
	}
	h.now = frozen.Add(31 * time.Second)
	if p := h.advance(); !p.Empty() {
		t.Fatalf("a second wake-up recorded again: %+v", p.Events)
	}
	h.now = frozen.Add(40 * time.Second)
	h.succeed("run1.a", `{}`) // late, already recorded
	if h.count(EventStepSLAMissed, "a") != 1 {
		t.Fatalf("the late settlement recorded the miss again: %v", h.eventTypes())
	}
	// b started at 40s: its deadline 1m40s comes before the run's.
	if want := frozen.Add(100 * time.Second); !h.last.WakeAt.Equal(want) {
		t.Fatalf("WakeAt = %s, want b's deadline %s", h.last.WakeAt, want)
	}
	h.now = frozen.Add(90 * time.Second)
	h.succeed("run1.b", `{}`) // within its SLA
	h.wantState(RunSucceeded)
	if h.count(EventStepSLAMissed, "b") != 0 || h.count(EventRunSLAMissed, "") != 0 {
		t.Fatalf("events %v: b and the run were within their SLAs", h.eventTypes())
	}
	if !h.last.WakeAt.IsZero() {
		t.Fatalf("WakeAt %s for a finished run", h.last.WakeAt)
	}
	// A wake-up left from before the run ended changes nothing.
	h.now = frozen.Add(5 * time.Minute)
	if p := h.advance(); !p.Empty() {
		t.Fatalf("a wake-up of the finished run at its deadline recorded %v", p.Events)
	}
}

// TestSLAMissedBySettlement: without a wake-up, the first plan past a
// deadline records the miss — a run still running, and a run and step
// that end late in that very plan.
func TestSLAMissedBySettlement(t *testing.T) {
	h := start(t, mustDef(t, slaYAML), `{}`)
	h.now = frozen.Add(10 * time.Minute)
	h.succeed("run1.a", `{}`)
	if h.count(EventStepSLAMissed, "a") != 1 || h.count(EventRunSLAMissed, "") != 1 {
		t.Fatalf("events %v, want a's and the run's misses", h.eventTypes())
	}
	if b := h.eventBody(EventRunSLAMissed, ""); b["sla"] != "5m0s" || b["state"] != "running" {
		t.Fatalf("run miss %v", b)
	}
	h.now = frozen.Add(20 * time.Minute)
	h.succeed("run1.b", `{}`)
	h.wantState(RunSucceeded)
	if h.count(EventStepSLAMissed, "b") != 1 || h.count(EventRunSLAMissed, "") != 1 {
		t.Fatalf("events %v: want b's miss, the run's still once", h.eventTypes())
	}
}

// TestSLADefinition: sla parses on the run and the steps, is in the
// canonical form (a definition without one keeps its plan hash), and a bad
// one is refused naming the field.
func TestSLADefinition(t *testing.T) {
	d := mustDef(t, slaYAML)
	if d.SLA.String() != "5m0s" || d.Steps[0].SLA.String() != "30s" {
		t.Fatalf("parsed %v %v", d.SLA, d.Steps[0].SLA)
	}
	back, err := Parse(d.Canonical())
	if err != nil || back.Hash() != d.Hash() || !strings.Contains(string(d.Canonical()), `"sla":"5m0s"`) {
		t.Fatalf("canonical %s: %v", d.Canonical(), err)
	}
	plain := mustDef(t, "name: w\nsteps:\n  - {id: a, kind: k}\n")
	if strings.Contains(string(plain.Canonical()), "sla") {
		t.Fatalf("a definition without an SLA has one in its canonical form: %s", plain.Canonical())
	}
	if mustDef(t, "name: w\nsla: 5m\nsteps:\n  - {id: a, kind: k}\n").Hash() == plain.Hash() {
		t.Fatal("the SLA is not in the plan hash")
	}
	for _, c := range []struct{ yaml, step, field string }{
		{"name: w\nsla: 300\nsteps:\n  - {id: a, kind: k}\n", "", "sla"},
		{"name: w\nsla: -5m\nsteps:\n  - {id: a, kind: k}\n", "", "sla"},
		{"name: w\nsla: soon\nsteps:\n  - {id: a, kind: k}\n", "", "sla"},
		{"name: w\nsteps:\n  - {id: a, kind: k, sla: 30}\n", "a", "sla"},
		{"name: w\nsteps:\n  - {id: a, kind: k, sla: -1s}\n", "a", "sla"},
	} {
		_, err := Parse([]byte(c.yaml))
		var de *DefinitionError
		if !errors.As(err, &de) || de.Field != c.field || de.Step != c.step {
			t.Errorf("%q: %v, want a DefinitionError on step %q field %q", c.yaml, err, c.step, c.field)
		}
	}
}
