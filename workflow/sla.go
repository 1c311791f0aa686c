package workflow

import (
	"time"

	"github.com/backstophq/backstop/store"
)

// SLAs (Definition.SLA, Step.SLA). A miss is decided by the engine's
// plans, from the rows as read and the run's UpdatedAt, the time of its
// last written plan: a deadline that fell after the last plan and not
// after now was not seen by any plan yet, so the first plan at or past it
// — the run's wake-up at the deadline (Plan.WakeAt), or an earlier
// settlement — records it (a run.sla_missed or step.sla_missed event),
// and writes the run, so no later plan records it again. A plan that
// ends the run or the step past its deadline records a miss no plan saw.
//
// A run's SLA counts from its start (CreatedAt) while it runs, compensates
// or cancels; a run halted waiting for an operator (failed,
// compensation_failed) is not checked until it is resumed. A step's counts
// from the start of its earliest row still unfinished (pending, or a
// for_each item waiting for a slot).

// slaBefore is what the checks read from before the plan's changes.
type slaBefore struct {
	lastPlan time.Time // the run's UpdatedAt as read
	active   bool      // the run was running, compensating or canceling
	// started: per step with an SLA, its earliest unfinished row's start.
	started map[string]time.Time
}

func (e *engine) slaBefore() slaBefore {
	b := slaBefore{lastPlan: e.run.UpdatedAt, active: e.run.RunID != "" && !Terminal(e.run.State)}
	for i := range e.def.Steps {
		s := &e.def.Steps[i]
		if s.SLA <= 0 {
			continue
		}
		if at, ok := e.unfinishedSince(s.ID); ok {
			if b.started == nil {
				b.started = map[string]time.Time{}
			}
			b.started[s.ID] = at
		}
	}
	return b
}

// unfinishedSince is the earliest start of step's unfinished rows.
func (e *engine) unfinishedSince(step string) (time.Time, bool) {
	var at time.Time
	for _, r := range e.rowsOf(step) {
		if r.State != StepPending && r.State != StepWaiting {
			continue
		}
		if at.IsZero() || r.UpdatedAt.Before(at) {
			at = r.UpdatedAt
		}
	}
	return at, !at.IsZero()
}

// dueNow: deadline fell after the last plan and is not after now.
func (e *engine) dueNow(deadline time.Time) bool {
	return deadline.After(e.sla.lastPlan) && !deadline.After(e.now)
}

// slaMissed adds the SLA misses this plan is the first to see.
func (e *engine) slaMissed() {
	if e.def.SLA > 0 && e.sla.active {
		if d := e.run.CreatedAt.Add(time.Duration(e.def.SLA)); e.dueNow(d) {
			e.event(EventRunSLAMissed, "", "", map[string]any{"sla": e.def.SLA.String(),
				"deadline": store.EventTime(d), "state": e.run.State})
		}
	}
	for i := range e.def.Steps {
		s := &e.def.Steps[i]
		start, ok := e.sla.started[s.ID]
		if !ok {
			continue
		}
		if d := start.Add(time.Duration(s.SLA)); e.dueNow(d) {
			e.event(EventStepSLAMissed, s.ID, "", map[string]any{"sla": s.SLA.String(),
				"deadline": store.EventTime(d), "started_at": store.EventTime(start)})
		}
	}
}

// slaWakeAt is the earliest SLA deadline still to come of the run (while
// it runs) and of its unfinished steps (zero: none).
func (e *engine) slaWakeAt() time.Time {
	if e.run.RunID == "" || Terminal(e.run.State) {
		return time.Time{}
	}
	var at time.Time
	if e.def.SLA > 0 {
		at = future(e.run.CreatedAt.Add(time.Duration(e.def.SLA)), e.now)
	}
	for i := range e.def.Steps {
		s := &e.def.Steps[i]
		if s.SLA <= 0 {
			continue
		}
		if start, ok := e.unfinishedSince(s.ID); ok {
			at = earliest(at, future(start.Add(time.Duration(s.SLA)), e.now))
		}
	}
	return at
}

// future is t when it is after now, else zero.
func future(t, now time.Time) time.Time {
	if t.After(now) {
		return t
	}
	return time.Time{}
}

// earliest of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}
