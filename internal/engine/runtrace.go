package engine

import (
	"context"
	"crypto/sha256"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/backstophq/backstop/internal/traceids"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// A workflow run is one trace (docs/observability.md, "Traces"). Its root
// span, `run <workflow>`, has ids derived from the run id (RunSpanContext),
// so the spans of its steps, started by whichever process enqueues them,
// name it as their parent before it exists; it is recorded once, when the
// run stops, by the process whose committed plan stopped it, from the
// run's created_at to its finished_at (AfterRuns). Each step task's
// enqueue is a `dispatch <step>` span under the root (`compensate <step>`
// for a compensation, `route <step>` for a route target), and its
// traceparent is the task's, so every attempt's `process <queue>` span,
// in-process, remote or a program run by `backstop work`, is its child.
//
// Sampling: the run's sampling decision is the tracer's for its root (a
// ratio sampler decides on the trace id, the same in every process); a run
// started with trace forced carries the attribute backstop.trace=true,
// which the binary's sampler always samples, and its steps' traceparents
// carry the sampled flag, which the next plans of the run read from the
// settled step (store.Settlement.TraceParent) to keep forcing.
//
// The root's span id is honoured by a tracer provider built with the
// IDGenerator of internal/traceids (the binary's; backstop.IDGenerator for
// a library's own provider); another provider gives it a random id, and
// the steps' spans then name a parent that is never recorded.

// ForceAttribute on a span forces its sampling (the binary's sampler).
const ForceAttribute = traceids.ForceAttribute

type forceKey struct{}

// ForceTrace is ctx asking that the run started (or the tasks enqueued)
// with it be traced whatever the sampling ratio.
func ForceTrace(ctx context.Context) context.Context {
	return context.WithValue(ctx, forceKey{}, true)
}

func traceForced(ctx context.Context) bool { v, _ := ctx.Value(forceKey{}).(bool); return v }

// RunSpanContext is the ids of run runID's root span: its trace id and
// span id are derived from the run id (sha256), so any process can name
// it. The flags are not set.
func RunSpanContext(runID string) trace.SpanContext {
	h := sha256.Sum256([]byte("backstop run " + runID))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], h[:16])
	copy(sid[:], h[16:24])
	if !sid.IsValid() { // all zero: vanishingly unlikely, but invalid
		sid[7] = 1
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
}

// runTrace is what a transaction's plans leave to trace once committed:
// the dispatch spans to end, and the runs whose settled steps were traced
// (sampled).
type runTrace struct {
	dispatch []dispatchSpan
	sampled  map[string]bool // run id -> a settled step of it was sampled
}

type dispatchSpan struct {
	span   trace.Span
	taskID string
}

// noteSettled remembers the runs whose settled step tasks were sampled
// (their traceparent's flag): the run's next spans are sampled too.
func (t *Telemetry) noteSettled(rt *runTrace, ss []store.Settlement) {
	if t.tracesOff {
		return
	}
	for _, s := range ss {
		if s.TraceParent == "" {
			continue
		}
		sc := trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": s.TraceParent}))
		if !sc.IsSampled() {
			continue
		}
		if run, _, ok := strings.Cut(s.TaskID, "."); ok && run != "" {
			if rt.sampled == nil {
				rt.sampled = map[string]bool{}
			}
			rt.sampled[run] = true
		}
	}
}

// runRootOptions are the options of run's root span (the probe that
// decides its sampling and the span recorded when it stops alike).
func runRootOptions(run store.RunRecord, forced bool) []trace.SpanStartOption {
	attrs := []attribute.KeyValue{attribute.String("run_id", run.RunID), attribute.String("workflow", run.Workflow),
		attribute.Int("workflow.version", run.Version), attribute.String("plan_hash", run.PlanHash)}
	if forced {
		attrs = append(attrs, attribute.Bool(ForceAttribute, true))
	}
	return []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
}

// runParent is the context the spans of run's steps are children of: the
// root's ids with the tracer's sampling decision for it (a span started and
// never ended, so never exported: the root is recorded when the run stops).
func (t *Telemetry) runParent(ctx context.Context, run store.RunRecord, forced bool) trace.SpanContext {
	want := RunSpanContext(run.RunID)
	_, probe := t.tracer.Start(traceids.With(context.WithoutCancel(ctx), want.TraceID(), want.SpanID()), "run "+run.Workflow,
		runRootOptions(run, forced)...)
	return probe.SpanContext()
}

// dispatchPlan opens the dispatch span of each step task plan enqueues,
// under its run's root, and sets the task's traceparent to it (params are
// plan.Enqueue's, in order). routeFrom names the step a route target is
// routed from.
func (t *Telemetry) dispatchPlan(ctx context.Context, rt *runTrace, plan workflow.Plan, params []EnqueueParams, insert bool, routeFrom func(step string) string) {
	if t.tracesOff || len(params) == 0 {
		return
	}
	run := plan.Run
	forced := traceForced(ctx) || rt.sampled[run.RunID]
	parent := t.runParent(ctx, run, forced)
	if !parent.IsValid() {
		return
	}
	var links []trace.Link
	if insert {
		// The run was started in the caller's trace: the first steps
		// link to it.
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	pctx := trace.ContextWithRemoteSpanContext(context.WithoutCancel(ctx), parent)
	for i := range params {
		p, st := &params[i], plan.Enqueue[i]
		name := "dispatch " + st.StepID
		attrs := []attribute.KeyValue{attrSystem, attribute.String("messaging.destination.name", p.Queue),
			attribute.String("messaging.operation.type", "send"), attribute.String("messaging.operation.name", "send"),
			attribute.String("messaging.message.id", p.ID), attribute.String("backstop.kind", p.Kind),
			attribute.String("run_id", run.RunID), attribute.String("workflow", run.Workflow),
			attribute.String("plan_hash", run.PlanHash), attribute.String("step_id", st.StepID)}
		if _, ok := st.Attributes[workflow.AttrStepItem]; ok {
			attrs = append(attrs, attribute.Int("step_item", st.Item))
		}
		if c := st.Attributes[workflow.AttrCompensationOf]; c != "" {
			name = "compensate " + st.StepID
			attrs = append(attrs, attribute.String("compensation_of", c))
		} else if from := routeFrom(st.StepID); from != "" {
			name = "route " + st.StepID
			attrs = append(attrs, attribute.String("route_from", from))
		}
		if forced {
			attrs = append(attrs, attribute.Bool(ForceAttribute, true))
		}
		sctx, span := t.tracer.Start(pctx, name, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attrs...), trace.WithLinks(links...))
		if p.TraceParent == "" && span.SpanContext().IsValid() {
			carrier := propagation.MapCarrier{}
			t.prop.Inject(sctx, carrier)
			p.TraceParent = carrier["traceparent"]
		}
		rt.dispatch = append(rt.dispatch, dispatchSpan{span: span, taskID: p.ID})
	}
}

// runsTraced ends the dispatch spans of committed plans and records the
// root span of each run the plans stopped (finished, or halted waiting for
// a replay: a run resumed then stopped again records it again, with the
// same ids and its new end).
func (t *Telemetry) runsTraced(ctx context.Context, rt *runTrace, plans []workflow.Plan) {
	if t.tracesOff {
		return
	}
	for _, d := range rt.dispatch {
		d.span.End()
	}
	rt.dispatch = nil
	for _, p := range plans {
		t.whenSpans(ctx, rt, p)
	}
	for _, p := range plans {
		state, stopped := stoppedState(p)
		if !stopped {
			continue
		}
		run := p.Run
		end := run.UpdatedAt
		if run.FinishedAt != nil {
			end = *run.FinishedAt
		}
		want := RunSpanContext(run.RunID)
		opts := append(runRootOptions(run, traceForced(ctx) || rt.sampled[run.RunID]), trace.WithTimestamp(run.CreatedAt))
		_, span := t.tracer.Start(traceids.With(context.WithoutCancel(ctx), want.TraceID(), want.SpanID()), "run "+run.Workflow, opts...)
		span.SetAttributes(attribute.String("backstop.run.state", state))
		switch store.RunState(state) {
		case workflow.RunFailed, workflow.RunCompensated, workflow.RunCompensationFailed:
			span.SetAttributes(attribute.String("error.type", state))
			span.SetStatus(codes.Error, run.Error)
		}
		span.End(trace.WithTimestamp(end))
	}
}

// stoppedState is the state a plan stopped its run in (run.finished or
// run.halted), if it did.
func stoppedState(p workflow.Plan) (string, bool) {
	for _, e := range p.Events {
		if e.Type == workflow.EventRunFinished || e.Type == workflow.EventRunHalted {
			return eventState(e, p.Run), true
		}
	}
	return "", false
}

// routeFrom answers, for a step of the plan hash's definition, the step
// that routes its failures to it ("" for a step no route targets).
func (e *Engine) routeFrom(ctx context.Context, hash string) func(string) string {
	return func(step string) string {
		def := e.defOf(ctx)(hash)
		if def == nil {
			return ""
		}
		for i := range def.Steps {
			if def.Steps[i].RouteTarget() == step {
				return def.Steps[i].ID
			}
		}
		return ""
	}
}

// defOf reads a plan hash's definition for telemetry (nil: unreadable).
func (e *Engine) defOf(ctx context.Context) func(string) *workflow.Definition {
	return func(hash string) *workflow.Definition {
		def, err := e.PlanByHash(ctx, hash)
		if err != nil {
			return nil
		}
		return def
	}
}

// whenSpans records one span per when condition a committed plan
// evaluated to decide a step — `when <step>` under the run's root, at the
// plan's time, with the result (true, false, error: status Error)
// (docs/observability.md, "Traces").
func (t *Telemetry) whenSpans(ctx context.Context, rt *runTrace, p workflow.Plan) {
	if len(p.When) == 0 {
		return
	}
	run := p.Run
	forced := traceForced(ctx) || rt.sampled[run.RunID]
	parent := t.runParent(ctx, run, forced)
	if !parent.IsValid() {
		return
	}
	pctx := trace.ContextWithRemoteSpanContext(context.WithoutCancel(ctx), parent)
	at := run.UpdatedAt
	for _, ev := range p.When {
		attrs := []attribute.KeyValue{attribute.String("run_id", run.RunID), attribute.String("workflow", run.Workflow),
			attribute.String("plan_hash", run.PlanHash), attribute.String("step_id", ev.Step),
			attribute.String("backstop.when.result", ev.Result)}
		if forced {
			attrs = append(attrs, attribute.Bool(ForceAttribute, true))
		}
		_, span := t.tracer.Start(pctx, "when "+ev.Step, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attrs...), trace.WithTimestamp(at))
		if ev.Result == "error" {
			span.SetAttributes(attribute.String("error.type", "when_error"))
			span.SetStatus(codes.Error, "the step's when could not be evaluated")
		}
		span.End(trace.WithTimestamp(at))
	}
}
