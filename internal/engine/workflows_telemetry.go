package engine

import (
	"context"
	"encoding/json"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// Workflow metrics (seed 003's set in Backstop's naming; docs/metrics.md):
// counted from the plans a committed transaction applied, so a rolled-back
// plan is never counted.
type workflowTelemetry struct {
	started       metric.Int64Counter     // {workflow}
	finished      metric.Int64Counter     // {workflow, state}
	steps         metric.Int64Counter     // {workflow, step, outcome}
	fanOut        metric.Int64Counter     // {workflow, step}
	compensations metric.Int64Counter     // {workflow, result}
	stepDuration  metric.Float64Histogram // {workflow, step}
	whenErrors    metric.Int64Counter     // {workflow, step}
}

func newWorkflowTelemetry(m metric.Meter) (*workflowTelemetry, []error) {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	dur, err := m.Float64Histogram("backstop.workflow.step.duration", metric.WithUnit("s"),
		metric.WithDescription("A workflow step's time from ready (its task enqueued) to settled, retries included, by workflow and step."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	return &workflowTelemetry{
		stepDuration:  dur,
		started:       counter("backstop.workflow.runs.started", "{run}", "Workflow runs started, by workflow."),
		finished:      counter("backstop.workflow.runs.finished", "{run}", "Workflow runs that reached a state where they stop (succeeded, partial, failed, compensated, compensation_failed, canceled), by workflow and state."),
		steps:         counter("backstop.workflow.steps", "{step}", "Workflow steps that finished, by workflow, step and outcome (succeeded, failed, skipped, canceled)."),
		fanOut:        counter("backstop.workflow.fanout.items", "{item}", "Tasks enqueued for the items of for_each steps, by workflow and step."),
		compensations: counter("backstop.workflow.compensations", "{step}", "Compensations that finished, by workflow and result (succeeded, failed)."),
		whenErrors:    counter("backstop.workflow.when.errors", "{step}", "Steps skipped because their when could not be evaluated (on_when_error: treat_as_false), by workflow and step."),
	}, errs
}

// WorkflowPlans counts what committed plans did.
func (t *Telemetry) WorkflowPlans(ctx context.Context, plans []workflow.Plan, durations []stepDuration) {
	w := t.workflows
	if w == nil {
		return
	}
	names := make(map[string]string, len(plans))
	for _, p := range plans {
		names[p.Run.RunID] = p.Run.Workflow
	}
	for _, d := range durations {
		if name, ok := names[d.runID]; ok && d.d >= 0 {
			w.stepDuration.Record(ctx, d.d.Seconds(), metric.WithAttributes(attribute.String("workflow", name),
				attribute.String("step", d.step)))
		}
	}
	for _, p := range plans {
		wf := attribute.String("workflow", p.Run.Workflow)
		for _, e := range p.Events {
			switch {
			case e.Type == "run.started":
				w.started.Add(ctx, 1, metric.WithAttributes(wf))
			case e.Type == workflow.EventRunFinished || e.Type == workflow.EventRunHalted:
				w.finished.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("state", eventState(e, p.Run))))
			case strings.HasPrefix(e.Type, "step.") && e.Type != "step.enqueued":
				w.steps.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", e.StepID),
					attribute.String("outcome", strings.TrimPrefix(e.Type, "step."))))
			}
		}
		for _, st := range p.Enqueue {
			if _, ok := st.Attributes["step_item"]; ok {
				w.fanOut.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", st.StepID)))
			}
		}
		for _, step := range p.SkippedOnWhenError {
			w.whenErrors.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", step)))
		}
		for _, r := range p.Steps {
			if r.CompensationOf == "" || (r.State != workflow.StepSucceeded && r.State != workflow.StepFailed) {
				continue
			}
			w.compensations.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("result", string(r.State))))
		}
	}
}

// eventState is the state a run.finished or run.halted event names (the
// run's, when the body has none).
func eventState(e workflow.Event, run store.RunRecord) string {
	var body struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(e.Body, &body)
	if body.State == "" {
		return string(run.State)
	}
	return body.State
}
