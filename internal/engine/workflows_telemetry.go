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

// Workflow metrics (docs/observability.md), counted from the plans a
// committed transaction applied, so a rolled-back plan is never counted.
type workflowTelemetry struct {
	started        metric.Int64Counter     // {workflow}
	finished       metric.Int64Counter     // {workflow, state}
	steps          metric.Int64Counter     // {workflow, step, outcome}
	fanOut         metric.Int64Counter     // {workflow, step}
	compensations  metric.Int64Counter     // {workflow, result}
	stepDuration   metric.Float64Histogram // {workflow, step}
	whenErrors     metric.Int64Counter     // {workflow, step}
	called         metric.Int64Counter     // {workflow, step}
	parked         metric.Int64Counter     // {workflow, step, reason}
	when           metric.Int64Counter     // {workflow, step, result}
	routes         metric.Int64Counter     // {workflow, step, result}
	items          metric.Int64Counter     // {workflow, step, outcome}
	runDuration    metric.Float64Histogram // {workflow, state}
	runsSLAMissed  metric.Int64Counter     // {workflow, queue}
	stepsSLAMissed metric.Int64Counter     // {workflow, step, queue}
	sinkMessages   metric.Int64Counter     // {workflow, step, sink}
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
	runDur, err := m.Float64Histogram("backstop.workflow.run.duration", metric.WithUnit("s"),
		metric.WithDescription("A workflow run's time from started to stopped (created_at to finished_at), by workflow and state."),
		metric.WithExplicitBucketBoundaries(runBuckets...))
	errs = append(errs, err)
	return &workflowTelemetry{
		stepDuration:   dur,
		runDuration:    runDur,
		called:         counter("backstop.workflow.steps.called", "{task}", "Workflow step tasks enqueued (steps, fan-out items, route targets, compensations), by workflow and step."),
		parked:         counter("backstop.workflow.steps.parked", "{step}", "Workflow steps that had to wait before they could start, by workflow, step and reason (needs: waiting on the steps they need when their run started; concurrency: a for_each item held back by its step's concurrency)."),
		when:           counter("backstop.workflow.when.evaluations", "{evaluation}", "Evaluations of steps' when conditions, by workflow, step and result (true, false, error)."),
		routes:         counter("backstop.workflow.routes", "{route}", "Routes decided, by workflow, the step whose failures route and result (taken: its failure was routed to the target; not_taken: it did not fail, the target was skipped)."),
		items:          counter("backstop.workflow.fanout.items.finished", "{item}", "Items of for_each steps that finished, by workflow, step and outcome (succeeded, failed, skipped, canceled)."),
		started:        counter("backstop.workflow.runs.started", "{run}", "Workflow runs started, by workflow."),
		finished:       counter("backstop.workflow.runs.finished", "{run}", "Workflow runs that reached a state where they stop (succeeded, partial, failed, compensated, compensation_failed, canceled), by workflow and state."),
		steps:          counter("backstop.workflow.steps", "{step}", "Workflow steps that finished, by workflow, step and outcome (succeeded, failed, skipped, canceled)."),
		fanOut:         counter("backstop.workflow.fanout.items", "{item}", "Tasks enqueued for the items of for_each steps, by workflow and step."),
		compensations:  counter("backstop.workflow.compensations", "{step}", "Compensations that finished, by workflow and result (succeeded, failed)."),
		runsSLAMissed:  counter("backstop.workflow.runs.sla_missed", "{run}", "Workflow runs that missed their SLA (still running at its deadline, or ended after it), once each, by workflow and queue (the workflow's)."),
		stepsSLAMissed: counter("backstop.workflow.steps.sla_missed", "{step}", "Workflow steps that missed their SLA (unfinished at its deadline, or ended after it), once per step start, by workflow, step and queue (the step's)."),
		whenErrors:     counter("backstop.workflow.when.errors", "{step}", "Steps skipped because their when could not be evaluated (on_when_error: treat_as_false), by workflow and step."),
		sinkMessages:   counter("backstop.workflow.sink.messages", "{message}", "Step results written to sinks through the outbox (message tasks on sink.<sink>, in the transaction that settled the step), by workflow, step and sink."),
	}, errs
}

// runBuckets are a run's duration buckets, in seconds (1 s to a day).
var runBuckets = []float64{1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}

// WorkflowPlans counts what committed plans did; defOf is a plan hash's
// definition (nil when it cannot be read: what needs it is not counted).
func (t *Telemetry) WorkflowPlans(ctx context.Context, plans []workflow.Plan, durations []stepDuration, defOf func(hash string) *workflow.Definition) {
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
		// queueOf is a step's queue ("": the run's), from the run's
		// definition ("" when it cannot be read).
		queueOf := func(step string) attribute.KeyValue {
			q := ""
			if def := defOf(p.Run.PlanHash); def != nil {
				q = def.QueueOf(step)
			}
			return attribute.String("queue", q)
		}
		for _, e := range p.Events {
			switch {
			case e.Type == "run.started":
				w.started.Add(ctx, 1, metric.WithAttributes(wf))
			case e.Type == workflow.EventRunFinished || e.Type == workflow.EventRunHalted:
				w.finished.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("state", eventState(e, p.Run))))
			case e.Type == workflow.EventRunSLAMissed:
				w.runsSLAMissed.Add(ctx, 1, metric.WithAttributes(wf, queueOf("")))
			case e.Type == workflow.EventStepSLAMissed:
				w.stepsSLAMissed.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", e.StepID), queueOf(e.StepID)))
			case strings.HasPrefix(e.Type, "step.") && e.Type != "step.enqueued" && e.Type != workflow.EventStepDelivering &&
				e.Type != workflow.EventStepDeadLettered:
				w.steps.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", e.StepID),
					attribute.String("outcome", strings.TrimPrefix(e.Type, "step."))))
			}
		}
		for _, st := range p.Enqueue {
			if _, ok := st.Attributes["step_item"]; ok {
				w.fanOut.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", st.StepID)))
			}
		}
		for _, m := range p.Publish {
			w.sinkMessages.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", m.StepID), attribute.String("sink", m.Sink)))
		}
		for _, step := range p.SkippedOnWhenError {
			w.whenErrors.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", step)))
		}
		for _, ev := range p.When {
			w.when.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", ev.Step), attribute.String("result", ev.Result)))
		}
		for _, ev := range p.Routes {
			w.routes.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", ev.Step), attribute.String("result", ev.Result)))
		}
		for _, st := range p.Enqueue {
			w.called.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", st.StepID)))
		}
		for _, r := range p.Steps {
			if r.State == workflow.StepWaiting {
				w.parked.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", r.StepID), attribute.String("reason", "concurrency")))
			}
		}
		if _, stopped := stoppedState(p); stopped && p.Run.FinishedAt != nil {
			w.runDuration.Record(ctx, max(p.Run.FinishedAt.Sub(p.Run.CreatedAt), 0).Seconds(),
				metric.WithAttributes(wf, attribute.String("state", eventStateOf(p))))
		}
		if def := defOf(p.Run.PlanHash); def != nil {
			w.planWithDef(ctx, wf, p, def)
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

// eventStateOf is the state the plan stopped its run in.
func eventStateOf(p workflow.Plan) string {
	s, _ := stoppedState(p)
	return s
}

// planWithDef counts what needs the run's definition: the steps parked on
// their needs when the run started (every step the starting plan left
// undecided, route targets included), and the fan-out items that finished.
func (w *workflowTelemetry) planWithDef(ctx context.Context, wf attribute.KeyValue, p workflow.Plan, def *workflow.Definition) {
	started := false
	decided := map[string]bool{}
	for _, e := range p.Events {
		if e.Type == workflow.EventRunStarted {
			started = true
		}
		if e.StepID != "" {
			decided[e.StepID] = true
		}
	}
	forEach := map[string]bool{}
	for i := range def.Steps {
		s := &def.Steps[i]
		if s.ForEach != "" {
			forEach[s.ID] = true
		}
		if started && !s.Compensation && !decided[s.ID] {
			w.parked.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", s.ID), attribute.String("reason", "needs")))
		}
	}
	for _, e := range p.Events {
		if !forEach[e.StepID] || e.Type == workflow.EventStepEnqueued || e.Type == workflow.EventStepSLAMissed || !strings.HasPrefix(e.Type, "step.") {
			continue
		}
		var body struct {
			Item  *int   `json:"item"`
			State string `json:"state"`
		}
		if json.Unmarshal(e.Body, &body) != nil || body.Item == nil {
			continue // the step as a whole (an empty for_each), not an item
		}
		outcome := strings.TrimPrefix(e.Type, "step.")
		if body.State == string(workflow.StepCanceled) {
			outcome = "canceled"
		}
		w.items.Add(ctx, 1, metric.WithAttributes(wf, attribute.String("step", e.StepID), attribute.String("outcome", outcome)))
	}
}
