package backstop

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// StepSelection selects the tasks of workflow steps (docs/workflows.md) by
// the attributes every step's task carries: workflow, run_id and step_id.
// A run halted by a dead step (on_failure halt) resumes when that step is
// replayed, so a redrive with a StepSelection resumes every run halted at
// a step with one call (RedriveParams.Steps). Empty fields select nothing
// more; an empty selection selects everything.
type StepSelection struct {
	// Workflow: the tasks of this workflow's runs (a registered workflow).
	Workflow string `json:"workflow,omitempty"`
	// RunID: the tasks of this run (a workflow run, or any run: tasks
	// sharing the run_id attribute, RunAttribute).
	RunID string `json:"run_id,omitempty"`
	// Step: the tasks of this step id (every item of a for_each step).
	Step string `json:"step,omitempty"`
}

// Empty reports whether s selects nothing more than its filter.
func (s StepSelection) Empty() bool { return s == StepSelection{} }

// Attrs is the selection as the attributes it filters on (nil when empty):
// a List, DeadLetters or ExportDLQ filter with these in ListParams.Attrs
// selects what the selection does.
func (s StepSelection) Attrs() map[string]string {
	if s.Empty() {
		return nil
	}
	m := map[string]string{}
	for _, kv := range [...][2]string{{workflow.AttrWorkflow, s.Workflow}, {RunAttribute, s.RunID}, {workflow.AttrStepID, s.Step}} {
		if kv[1] != "" {
			m[kv[0]] = kv[1]
		}
	}
	return m
}

// stepSelectionField names a selection's attribute in errors: the field
// of the selection that sets it.
var stepSelectionField = map[string]string{workflow.AttrWorkflow: "workflow", RunAttribute: "run_id", workflow.AttrStepID: "step"}

// Apply checks the selection's syntax and returns f with the selection's
// attributes added to a copy of f.Attrs. An attribute f already filters on
// with another value is refused (the filter would match nothing).
func (s StepSelection) Apply(f ListParams) (ListParams, error) {
	if s.Workflow != "" {
		if err := workflow.ValidName(s.Workflow); err != nil {
			return f, invalid("workflow", "%v", err)
		}
	}
	if s.RunID != "" {
		if err := validRunID(s.RunID); err != nil {
			return f, err
		}
	}
	if s.Step != "" {
		if err := workflow.ValidName(s.Step); err != nil {
			return f, invalid("step", "step id %v", err)
		}
	}
	add := s.Attrs()
	if add == nil {
		return f, nil
	}
	attrs := make(map[string]string, len(f.Attrs)+len(add))
	maps.Copy(attrs, f.Attrs)
	for k, v := range add {
		if old, ok := attrs[k]; ok && old != v {
			field := stepSelectionField[k]
			return f, invalid(field, "%s %q contradicts the attribute filter %s=%q (the selection filters on attribute %s)", field, v, k, old, k)
		}
		attrs[k] = v
	}
	f.Attrs = attrs
	return f, nil
}

// CheckStepSelection checks a selection against the registry, so that a
// typo is named instead of matching nothing: the workflow must be
// registered; a run that is a workflow run must be of that workflow; the
// step must be a step of the workflow (of any of its versions) or of the
// run's version. A run that is not a workflow run (a batch of tasks with a
// run_id) is accepted without a workflow. Nothing is written.
func (c *Client) CheckStepSelection(ctx context.Context, s StepSelection) error {
	if _, err := s.Apply(ListParams{}); err != nil {
		return err
	}
	var defs []*workflow.Definition // the versions the step may be in
	if s.RunID != "" {
		run, _, err := c.store.GetRun(ctx, s.RunID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if s.Workflow != "" {
				return invalid("run_id", "run %q is not a run of workflow %q (no workflow run has that id)", s.RunID, s.Workflow)
			}
		case err != nil:
			return err
		case s.Workflow != "" && run.Workflow != s.Workflow:
			return invalid("run_id", "run %q is a run of workflow %q, not %q", s.RunID, run.Workflow, s.Workflow)
		default:
			def, err := c.e.PlanByHash(ctx, run.PlanHash)
			if err != nil {
				return err
			}
			if s.Step != "" && def.Step(s.Step) == nil {
				return invalid("step", "run %q (workflow %q version %d) has no step %q", s.RunID, run.Workflow, run.Version, s.Step)
			}
			return nil
		}
	}
	if s.Workflow == "" {
		return nil
	}
	latest, def, err := c.Workflow(ctx, s.Workflow, 0)
	if errors.Is(err, ErrNotFound) {
		return invalid("workflow", "workflow %q is not registered (backstop workflows list)", s.Workflow)
	}
	if err != nil {
		return err
	}
	if s.Step == "" {
		return nil
	}
	defs = append(defs, def)
	for v := latest.Version - 1; v >= 1 && defs[len(defs)-1].Step(s.Step) == nil; v-- {
		_, d, err := c.Workflow(ctx, s.Workflow, v)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		defs = append(defs, d)
	}
	if defs[len(defs)-1].Step(s.Step) == nil {
		return invalid("step", "workflow %q has no step %q in any of its %d versions", s.Workflow, s.Step, latest.Version)
	}
	return nil
}

// applySteps is a redrive's selection checked and added to its filter. A
// run it names must exist (a workflow run, or tasks with that run_id):
// ErrNotFound otherwise; a workflow run that finished (succeeded,
// partial, compensated, canceled) has nothing to resume: ErrConflict.
// Nothing is written either way.
func (c *Client) applySteps(ctx context.Context, f ListParams, s StepSelection) (ListParams, error) {
	if s.Empty() {
		return f, nil
	}
	if err := c.CheckStepSelection(ctx, s); err != nil {
		return f, err
	}
	if s.RunID != "" {
		run, _, err := c.store.GetRun(ctx, s.RunID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			page, err := c.store.List(ctx, ListParams{Attrs: map[string]string{RunAttribute: s.RunID}, Limit: 1, WithoutPayload: true})
			if err != nil {
				return f, err
			}
			if len(page) == 0 {
				return f, fmt.Errorf("run %q: %w: no workflow run has that id and no task has that run_id", s.RunID, ErrNotFound)
			}
		case err != nil:
			return f, err
		case workflow.Finished(run.State):
			return f, fmt.Errorf("%w: run %q is %s: it finished, so it has nothing to resume (a dead letter of it can still be replayed alone: backstop dlq replay ID)",
				ErrConflict, s.RunID, run.State)
		}
	}
	return s.Apply(f)
}
