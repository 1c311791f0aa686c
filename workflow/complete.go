package workflow

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

// EventStepForceCompleted is the audit event of an operator's forced
// completion of a step (CompleteStep): body run_id, workflow, step_id,
// item, task_id, reason, state (the row's state before), run_state (the
// run's after).
const EventStepForceCompleted = "step.force_completed"

// Force names the step row an operator settles as succeeded (CompleteStep)
// and how: Result is its result (empty: null), Reason why.
type Force struct {
	Step   string
	Item   int
	Result json.RawMessage
	Reason string
}

// CompleteStep settles a dead or stuck step row as succeeded with
// f.Result, as an operator decided, and the run goes on from there. The
// row may be
//
//   - failed or canceled (not with its run) under halt, or a dead
//     compensation: the run stopped on it, or will once nothing runs; a
//     failed run is running again, a compensation_failed one compensating
//     again (as Resume does);
//   - pending (its task waits or runs): the task goes in Plan.Cancel (the
//     caller cancels it if it waits, asks it to stop if it runs). The run
//     does not wait for it: the row is no longer pending, so the task's
//     later settlement, whatever it is, changes nothing.
//
// Refused, with an error wrapping store.ErrNotFound: a step the
// definition does not have, or a row the run does not have (not started,
// or no such item); wrapping store.ErrConflict: a run that has ended
// (succeeded, partial, compensated, canceled), a row that succeeded or was
// skipped, waits for a slot (no task yet), was canceled with its run, or
// failed under a policy that handled the failure (continue, a route), and
// a step row (not a compensation) that failed while the run rolls back
// (force its compensations instead).
//
// The plan's events: step.force_completed (the audit record), then
// step.succeeded with body forced: true and the reason, then what follows.
func CompleteStep(def *Definition, run store.RunRecord, steps []store.StepRecord, f Force, now time.Time) (Plan, error) {
	prog, err := def.programs()
	if err != nil {
		return Plan{}, err
	}
	if err := checkRun(def, run); err != nil {
		return Plan{}, err
	}
	if Finished(run.State) {
		return Plan{}, fmt.Errorf("run %s is %s: it has ended, and none of its steps can be completed: %w", run.RunID, run.State, store.ErrConflict)
	}
	s := def.Step(f.Step)
	if s == nil {
		return Plan{}, fmt.Errorf("workflow %q version %d has no step %q: %w", run.Workflow, run.Version, f.Step, store.ErrNotFound)
	}
	e := newEngine(def, prog, run, steps, now)
	k := rowKey{f.Step, f.Item}
	r, ok := e.rows[k]
	if !ok {
		if len(e.byStep[f.Step]) == 0 {
			return Plan{}, fmt.Errorf("step %q of run %s has not started: %w", f.Step, run.RunID, store.ErrNotFound)
		}
		return Plan{}, fmt.Errorf("step %q of run %s has no item %d (items %v): %w", f.Step, run.RunID, f.Item, e.byStep[f.Step], store.ErrNotFound)
	}
	if why := forceRefused(e, s, r); why != "" {
		return Plan{}, fmt.Errorf("step %q item %d of run %s %s: %w", f.Step, f.Item, run.RunID, why, store.ErrConflict)
	}
	before := r.State
	if r.State == StepPending {
		e.plan.Cancel = append(e.plan.Cancel, r.TaskID)
		e.plan.CancelError = "its step was force-completed: " + f.Reason
	}
	e.run.Seq++
	r.State, r.Error, r.CompletedSeq = StepSucceeded, "", e.run.Seq
	r.Result = jsonOrString(f.Result)
	e.put(r)
	switch run.State {
	case RunFailed:
		e.run.State, e.run.Error, e.run.FinishedAt = RunRunning, "", nil
	case RunCompensationFailed:
		e.run.State, e.run.FinishedAt = RunCompensating, nil
	}
	audit := map[string]any{"item": r.Item, "state": before, "run_state": e.run.State}
	body := map[string]any{"item": r.Item, "forced": true}
	if f.Reason != "" {
		audit["reason"], body["reason"] = f.Reason, f.Reason
	}
	if r.CompensationOf != "" {
		audit["compensation_of"], body["compensation_of"] = r.CompensationOf, r.CompensationOf
	}
	e.event(EventStepForceCompleted, r.StepID, r.TaskID, audit)
	e.event(EventStepSucceeded, r.StepID, r.TaskID, body)
	if err := e.progress(); err != nil {
		return Plan{}, err
	}
	return e.result(), nil
}

// forceRefused says why row r of step s cannot be force-completed, or ""
// when it can.
func forceRefused(e *engine, s *Step, r *store.StepRecord) string {
	switch r.State {
	case StepSucceeded:
		return "has succeeded already"
	case StepSkipped:
		return "was skipped (" + r.Error + ")"
	case StepWaiting:
		return "has not started: it waits for a slot of its step's concurrency"
	case StepPending:
		if r.TaskID == "" {
			return "has no task"
		}
		return ""
	case StepFailed, StepCanceled:
		if r.Error == CanceledError {
			return "was canceled with its run"
		}
		if r.CompensationOf != "" {
			return ""
		}
		if policyOf(s) != Halt {
			return fmt.Sprintf("failed under on_failure %s, which handled the failure", policyOf(s))
		}
		if e.run.State == RunCompensating || e.run.State == RunCompensationFailed {
			return "failed and the run rolls back: complete its compensations instead"
		}
		return ""
	}
	return fmt.Sprintf("is %s", r.State)
}
