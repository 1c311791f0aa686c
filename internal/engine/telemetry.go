package engine

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// instrumentationName names the library's meter and tracer.
const instrumentationName = "github.com/backstophq/backstop"

// Histogram buckets, in seconds (seed 003's step and queue-wait buckets).
var (
	durationBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}
	waitBuckets     = []float64{0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 300}
)

// telemetry holds the library's instruments. Every instrument is built
// once per Engine; call sites pass pre-built attribute options where the
// label set is fixed so the hot path does not allocate per task.
type Telemetry struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator

	enqueued   metric.Int64Counter
	claims     metric.Int64Counter
	attempts   metric.Int64Counter
	retries    metric.Int64Counter
	dead       metric.Int64Counter
	replays    metric.Int64Counter
	discards   metric.Int64Counter
	tooComplex metric.Int64Counter
	duration   metric.Float64Histogram
	wait       metric.Float64Histogram

	// OpenTelemetry messaging semantic conventions.
	msgProcess  metric.Float64Histogram
	msgSent     metric.Int64Counter
	msgConsumed metric.Int64Counter

	workflows *workflowTelemetry // workflows_telemetry.go
	// scheduleTicks: schedule_telemetry.go
	scheduleTicks metric.Int64Counter
	// countCorrections: counts_telemetry.go
	countCorrections metric.Int64Counter

	// events writes the log events (logevents.go).
	events otellog.Logger

	// tracesOff: the tracer provider is a no-op one; span work is skipped.
	tracesOff bool
	// Label sets built once per distinct key, so the hot path neither
	// sorts nor allocates attribute sets per task.
	qkSets      attrCache[[2]string] // queue, kind
	outcomeSets attrCache[[3]string] // queue, kind, outcome
	enqSets     attrCache[[3]string] // queue, kind, merged
	deadSets    attrCache[[4]string] // queue, kind, reason, too_complex
	sentSets    attrCache[string]    // queue
	recvSets    attrCache[string]    // queue
	procSets    attrCache[[2]string] // queue, error.type
	claimSets   sync.Map             // queue -> *queueAttrs
}

// attrCache maps a label key to its pre-built measurement options. It is
// read on every measurement and written once per new key: readers load an
// immutable map (no lock, and no key boxed into an interface as sync.Map
// would, which allocates); a new key copies it.
type attrCache[K comparable] struct {
	m  atomic.Pointer[map[K]attrOpts]
	mu sync.Mutex
}

// attrOpts is one label set as the options of Add and Record, in slices
// made once: passing them on with opts... allocates nothing, where a
// single option in a variadic call allocates its slice on every call.
type attrOpts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newAttrOpts(set attribute.Set) attrOpts {
	o := metric.WithAttributeSet(set)
	return attrOpts{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

func (c *attrCache[K]) get(k K, build func() attribute.Set) attrOpts {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	m := map[K]attrOpts{}
	if old != nil {
		m = maps.Clone(*old)
	}
	v := newAttrOpts(build())
	m[k] = v
	c.m.Store(&m)
	return v
}

func (t *Telemetry) qk(q, k string) attrOpts {
	return t.qkSets.get([2]string{q, k}, func() attribute.Set {
		return attribute.NewSet(attribute.String("queue", q), attribute.String("kind", k))
	})
}

var attrSystem = attribute.String("messaging.system", "backstop")

func newTelemetry(mp metric.MeterProvider, tp trace.TracerProvider, lp otellog.LoggerProvider, orderingByQueue map[string]*OrderingStats) (*Telemetry, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(instrumentationName)
	_, off := tp.(noop.TracerProvider)
	t := &Telemetry{tracer: tp.Tracer(instrumentationName), prop: propagation.TraceContext{}, tracesOff: off,
		events: eventsLogger(lp)}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	hist := func(name, desc string, b []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(b...))
		errs = append(errs, err)
		return h
	}
	t.enqueued = counter("backstop.tasks.enqueued", "{task}", "Tasks enqueued, by queue, kind and whether they merged into a waiting task.")
	t.claims = counter("backstop.claims", "{claim}", "Claim rounds by workers, by queue and result (ok, empty, error).")
	t.attempts = counter("backstop.attempts", "{attempt}", "Finished attempts, by queue, kind and outcome.")
	t.retries = counter("backstop.retries", "{retry}", "Retries scheduled after a failed attempt, by queue and kind.")
	t.dead = counter("backstop.dead_letters", "{task}", "Tasks dead-lettered, by queue, kind, reason and too_complex.")
	t.replays = counter("backstop.replays", "{task}", "Dead-letter replays, by result (ok, error, conflict).")
	t.discards = counter("backstop.discards", "{task}", "Dead letters discarded.")
	t.tooComplex = counter("backstop.tasks.too_complex", "{task}", "Tasks over their queue's complexity or size threshold, by queue and kind.")
	t.duration = hist("backstop.task.duration", "Duration of one attempt, by queue, kind and outcome.", durationBuckets)
	t.wait = hist("backstop.queue.wait", "Time from a task's run_at to its claim, by queue and kind.", waitBuckets)
	t.msgProcess = hist("messaging.process.duration", "Duration of processing one message (OpenTelemetry messaging conventions).", durationBuckets)
	t.msgSent = counter("messaging.client.sent.messages", "{message}", "Messages sent (OpenTelemetry messaging conventions).")
	t.msgConsumed = counter("messaging.client.consumed.messages", "{message}", "Messages delivered to a consumer (OpenTelemetry messaging conventions).")
	wf, wfErrs := newWorkflowTelemetry(m)
	t.workflows = wf
	errs = append(errs, wfErrs...)
	var schedErr error
	t.scheduleTicks, schedErr = newScheduleTicks(m)
	errs = append(errs, schedErr)
	var countsErr error
	t.countCorrections, countsErr = newCountCorrections(m)
	errs = append(errs, countsErr)
	// The ordering counters (ordering.go) are kept by the engine as atomics,
	// per ordered queue, and observed at collection:
	// backstop_ordering_<name>_total{queue}.
	if len(orderingByQueue) > 0 {
		var obs []metric.Observable
		insts := map[string]metric.Int64ObservableCounter{}
		for name := range (&OrderingStats{}).Counters() {
			c, err := m.Int64ObservableCounter("backstop.ordering."+name, metric.WithUnit("{event}"),
				metric.WithDescription("ordered processing: "+strings.ReplaceAll(name, "_", " ")+", by queue (docs/ordering.md)."))
			errs = append(errs, err)
			if err == nil {
				insts[name] = c
				obs = append(obs, c)
			}
		}
		queues := make(map[string]metric.ObserveOption, len(orderingByQueue))
		for q := range orderingByQueue {
			queues[q] = metric.WithAttributeSet(attribute.NewSet(attribute.String("queue", q)))
		}
		_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			for q, st := range orderingByQueue {
				for name, v := range st.Counters() {
					if c, ok := insts[name]; ok {
						o.ObserveInt64(c, v, queues[q])
					}
				}
			}
			return nil
		}, obs...)
		errs = append(errs, err)
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return t, nil
}

// queueAttrs are a queue's pre-built claim label sets.
type queueAttrs struct {
	claimOK, claimEmpty, claimError []metric.AddOption
}

// forQueue is q's claim label sets, built once per queue.
func (t *Telemetry) forQueue(q string) *queueAttrs {
	if qa, ok := t.claimSets.Load(q); ok {
		return qa.(*queueAttrs)
	}
	mk := func(r string) []metric.AddOption {
		return newAttrOpts(attribute.NewSet(attribute.String("queue", q), attribute.String("result", r))).add
	}
	qa, _ := t.claimSets.LoadOrStore(q, &queueAttrs{claimOK: mk("ok"), claimEmpty: mk("empty"), claimError: mk("error")})
	return qa.(*queueAttrs)
}

// claimed records one claim round.
func (t *Telemetry) claimed(ctx context.Context, queue string, tasks []*Task, err error, now time.Time) {
	qa := t.forQueue(queue)
	switch {
	case err != nil:
		t.claims.Add(ctx, 1, qa.claimError...)
		return
	case len(tasks) == 0:
		t.claims.Add(ctx, 1, qa.claimEmpty...)
		return
	}
	t.claims.Add(ctx, 1, qa.claimOK...)
	// Counters are added once per run of equal labels (a claim's tasks
	// share their queue): each measurement costs the SDK about as much
	// whatever the increment.
	var consumed labelRun[string]
	add := func(q string, n int64) { t.msgConsumed.Add(ctx, n, t.recv(q).add...) }
	for _, tk := range tasks {
		t.wait.Record(ctx, max(now.Sub(tk.RunAt), 0).Seconds(), t.qk(tk.Queue, tk.Kind).rec...)
		consumed.add(tk.Queue, add)
	}
	consumed.flush(add)
}

func (t *Telemetry) recv(q string) attrOpts {
	return t.recvSets.get(q, func() attribute.Set {
		return attribute.NewSet(attrSystem, attribute.String("messaging.destination.name", q), attribute.String("messaging.operation.name", "receive"))
	})
}

// labelRun counts consecutive measurements with the same labels, to add
// them to a counter at once: add reports the run it ends, flush the last.
type labelRun[K comparable] struct {
	key K
	n   int64
}

func (r *labelRun[K]) add(k K, report func(K, int64)) {
	if r.n > 0 && k != r.key {
		report(r.key, r.n)
		r.n = 0
	}
	r.key = k
	r.n++
}

func (r *labelRun[K]) flush(report func(K, int64)) {
	if r.n > 0 {
		report(r.key, r.n)
		r.n = 0
	}
}

// StartSend opens one producer span per task and stores its context as the
// task's W3C traceparent (unless the caller brought one). It returns the
// params to enqueue (a copy when any was changed) and the spans to end.
func (t *Telemetry) StartSend(ctx context.Context, params []EnqueueParams) ([]EnqueueParams, []trace.Span) {
	if t.tracesOff {
		return params, nil
	}
	spans := make([]trace.Span, len(params))
	copied := false
	for i := range params {
		p := &params[i]
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attrSystem, attribute.String("messaging.destination.name", p.Queue),
				attribute.String("messaging.operation.type", "send"), attribute.String("messaging.operation.name", "send"),
				attribute.String("backstop.kind", p.Kind))}
		if p.Trace || traceForced(ctx) {
			opts = append(opts, trace.WithAttributes(attribute.Bool(ForceAttribute, true)))
		}
		sctx, span := t.tracer.Start(ctx, "send "+p.Queue, opts...)
		spans[i] = span
		if p.TraceParent == "" && span.SpanContext().IsValid() {
			if !copied {
				params = append([]EnqueueParams(nil), params...)
				p, copied = &params[i], true
			}
			carrier := propagation.MapCarrier{}
			t.prop.Inject(sctx, carrier)
			p.TraceParent = carrier["traceparent"]
		}
	}
	return params, spans
}

// EndSend closes the producer spans and counts what was enqueued.
func (t *Telemetry) EndSend(ctx context.Context, spans []trace.Span, rs []EnqueueResult, err error) {
	for i, s := range spans {
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, err.Error())
			s.SetAttributes(attribute.String("error.type", "enqueue_failed"))
		} else if i < len(rs) && rs[i].Task != nil {
			s.SetAttributes(attribute.String("messaging.message.id", rs[i].Task.ID), attribute.Bool("backstop.merged", rs[i].Merged))
		}
		s.End()
	}
	if err != nil {
		return
	}
	type enqKey struct {
		q, k   string
		merged bool
	}
	var (
		enq  labelRun[enqKey]
		sent labelRun[string]
	)
	addEnq := func(e enqKey, n int64) {
		t.enqueued.Add(ctx, n, t.enqSets.get([3]string{e.q, e.k, strconv.FormatBool(e.merged)}, func() attribute.Set {
			return attribute.NewSet(attribute.String("queue", e.q), attribute.String("kind", e.k), attribute.Bool("merged", e.merged))
		}).add...)
	}
	addSent := func(q string, n int64) {
		t.msgSent.Add(ctx, n, t.sentSets.get(q, func() attribute.Set {
			return attribute.NewSet(attrSystem, attribute.String("messaging.destination.name", q), attribute.String("messaging.operation.name", "send"))
		}).add...)
	}
	events := t.eventsOn(ctx)
	for i, r := range rs {
		if r.Task == nil || r.Duplicate {
			continue
		}
		if events {
			var sc trace.SpanContext
			if i < len(spans) {
				sc = spans[i].SpanContext()
			}
			t.enqueuedEvent(ctx, sc, r.Task, r.Merged)
		}
		enq.add(enqKey{r.Task.Queue, r.Task.Kind, r.Merged}, addEnq)
		sent.add(r.Task.Queue, addSent)
	}
	enq.flush(addEnq)
	sent.flush(addSent)
}

// creationContext is the producer's span context stored with the task.
func (t *Telemetry) creationContext(tk *Task) trace.SpanContext {
	if tk.TraceParent == "" {
		return trace.SpanContext{}
	}
	ctx := t.prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": tk.TraceParent})
	return trace.SpanContextFromContext(ctx)
}

// StartProcess opens the consumer span of one attempt: a child of the
// creation context (a new root when the task has none) and linked to it.
func (t *Telemetry) StartProcess(ctx context.Context, tk *Task, extra ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.tracesOff {
		return ctx, nil
	}
	opts := append(extra, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrSystem, attribute.String("messaging.destination.name", tk.Queue),
			attribute.String("messaging.message.id", tk.ID), attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"), attribute.String("backstop.kind", tk.Kind),
			attribute.Int("backstop.attempt", tk.Attempt), attribute.String("backstop.execution_id", tk.ExecutionID)))
	if v := tk.Attributes["run_id"]; v != "" {
		opts = append(opts, trace.WithAttributes(attribute.String("run_id", v)))
	}
	if v := tk.Attributes["plan_hash"]; v != "" {
		opts = append(opts, trace.WithAttributes(attribute.String("plan_hash", v)))
	}
	if sc := t.creationContext(tk); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	return t.tracer.Start(ctx, "process "+tk.Queue, opts...)
}

// Settled records one finished attempt: its outcome, duration, and what
// the settlement did to the task (retry, dead letter); it ends the span.
func (t *Telemetry) Settled(span trace.Span, tk *Task, started time.Time, s *store.Settlement) {
	t.attempts.Add(context.Background(), 1, t.outcomeSet([3]string{tk.Queue, tk.Kind, string(s.Outcome)}).add...)
	t.SettledUncounted(span, tk, started, s)
}

// outcomeSet is the label set queue, kind, outcome.
func (t *Telemetry) outcomeSet(key [3]string) attrOpts {
	return t.outcomeSets.get(key, func() attribute.Set {
		return attribute.NewSet(attribute.String("queue", key[0]), attribute.String("kind", key[1]), attribute.String("outcome", key[2]))
	})
}

// SettledUncounted is settled but for the attempts counter (the caller
// adds to it).
func (t *Telemetry) SettledUncounted(span trace.Span, tk *Task, started time.Time, s *store.Settlement) {
	ctx := context.Background()
	d := max(s.FinishedAt.Sub(started), 0).Seconds()
	outcome := string(s.Outcome)
	q, k := tk.Queue, tk.Kind
	kv := t.outcomeSet([3]string{q, k, outcome})
	t.duration.Record(ctx, d, kv.rec...)
	errType := errorType(s)
	t.msgProcess.Record(ctx, d, t.procSets.get([2]string{q, errType}, func() attribute.Set {
		msg := []attribute.KeyValue{attrSystem, attribute.String("messaging.destination.name", q),
			attribute.String("messaging.operation.name", "process")}
		if errType != "" {
			msg = append(msg, attribute.String("error.type", errType))
		}
		return attribute.NewSet(msg...)
	}).rec...)
	switch {
	case s.State == bt.StateDead:
		t.DeadLettered(ctx, tk, string(s.DeadReason))
	case !s.Uncharged && (s.State == bt.StateScheduled || s.State == bt.StatePending) && s.Outcome != bt.OutcomeSucceeded:
		t.retries.Add(ctx, 1, t.qk(q, k).add...)
	}
	t.settledEvent(span, tk, started, s)
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("backstop.outcome", outcome))
	if errType != "" {
		span.SetAttributes(attribute.String("error.type", errType))
		span.SetStatus(codes.Error, s.Error)
	}
	span.End(trace.WithTimestamp(s.FinishedAt))
}

// DeadLettered counts one dead letter.
func (t *Telemetry) DeadLettered(ctx context.Context, tk *Task, reason string) {
	q, k, tc := tk.Queue, tk.Kind, taskTooComplex(tk)
	t.dead.Add(ctx, 1, t.deadSets.get([4]string{q, k, reason, strconv.FormatBool(tc)}, func() attribute.Set {
		return attribute.NewSet(attribute.String("queue", q), attribute.String("kind", k),
			attribute.String("reason", reason), attribute.Bool("too_complex", tc))
	}).add...)
}

// taskTooComplex reads the complexity policy's verdict (complexity.go).
func taskTooComplex(t *Task) bool { return t.Attributes[TooComplexAttribute] == "true" }

// errorType is the span's and metric's error.type: the outcome of a failed
// attempt (transient_error, permanent_error, timeout, ...); empty on success.
func errorType(s *store.Settlement) string {
	switch s.Outcome {
	case bt.OutcomeSucceeded, bt.OutcomeSnoozed, bt.OutcomeCanceled:
		return ""
	}
	return string(s.Outcome)
}

// Replayed counts one replay by result: ok, conflict or error.
func (t *Telemetry) Replayed(ctx context.Context, err error) {
	r := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrConflict):
		r = "conflict"
	default:
		r = "error"
	}
	t.replays.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(attribute.String("result", r))))
}

// ReplayedBatch counts a redrive batch: ok replays and conflicts.
func (t *Telemetry) ReplayedBatch(ctx context.Context, ok, conflicts int) {
	if ok > 0 {
		t.replays.Add(ctx, int64(ok), replayOK)
	}
	if conflicts > 0 {
		t.replays.Add(ctx, int64(conflicts), replayConflict)
	}
}

var (
	replayOK       = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "ok")))
	replayConflict = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "conflict")))
)

// Discarded counts one discard.
func (t *Telemetry) Discarded(ctx context.Context, tk *Task) {
	t.discards.Add(ctx, 1, t.qk(tk.Queue, tk.Kind).add...)
}

// TooComplex counts a task found over its queue's complexity thresholds
// (the complexity policy calls it).
func (e *Engine) countTooComplex(ctx context.Context, tk *Task) {
	e.Telemetry.tooComplex.Add(ctx, 1, e.Telemetry.qk(tk.Queue, tk.Kind).add...)
}

// LeaseLost ends an attempt's span whose result is not settled by this
// worker (its lease was lost, or it was released at shutdown).
func (t *Telemetry) LeaseLost(span trace.Span) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("backstop.outcome", "abandoned"), attribute.String("error.type", "lease_lost"))
	span.SetStatus(codes.Error, "attempt abandoned: lease lost or released")
	span.End()
}

// Released ends the span of a remote attempt given back uncharged.
func (t *Telemetry) Released(span trace.Span) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("backstop.outcome", string(bt.OutcomeReleased)))
	span.End()
}

// endElsewhere ends the span of a remote attempt that another process
// Settled, with the outcome the store recorded (ex nil: unknown).
func (t *Telemetry) endElsewhere(span trace.Span, ex *bt.Execution) {
	if ex == nil || ex.FinishedAt == nil {
		t.LeaseLost(span)
		return
	}
	span.SetAttributes(attribute.String("backstop.outcome", string(ex.Outcome)))
	if et := errorType(&store.Settlement{Outcome: ex.Outcome}); et != "" {
		span.SetAttributes(attribute.String("error.type", et))
		span.SetStatus(codes.Error, ex.Error)
	}
	span.End(trace.WithTimestamp(*ex.FinishedAt))
}

// attemptStart is when t's current attempt began (when known).
func attemptStart(t *Task, fallback time.Time) time.Time {
	if t.AttemptedAt != nil {
		return *t.AttemptedAt
	}
	return fallback
}

// SettledBatch records the in-process attempts of one settle batch once
// the store answered (oks; nil: it could not be written): an attempt whose
// settlement applied is counted (by queue, kind, outcome, with its
// duration, retry or dead letter) and its span ends with the outcome; one
// that did not apply (its lease was no longer current: maintenance settled
// it as lease_expired, and counted it) or could not be written is not
// counted, and its span ends abandoned. at(i) is the i-th attempt of n.
func (t *Telemetry) SettledBatch(n int, at func(i int) (tk *Task, span trace.Span, started time.Time, s *store.Settlement), oks []bool) {
	// The attempts counter is added to once per run of equal labels.
	var run labelRun[[3]string]
	add := func(k [3]string, n int64) { t.attempts.Add(context.Background(), n, t.outcomeSet(k).add...) }
	for i := range n {
		tk, span, started, s := at(i)
		if i < len(oks) && oks[i] {
			run.add([3]string{tk.Queue, tk.Kind, string(s.Outcome)}, add)
			t.SettledUncounted(span, tk, started, s)
		} else {
			t.LeaseLost(span)
		}
	}
	run.flush(add)
}
