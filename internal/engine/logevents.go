package engine

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/log/global"
	"go.opentelemetry.io/otel/trace"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// OpenTelemetry log events (docs/observability.md, "Log events"): one log
// record per step of a task's life, written through the configuration's
// LoggerProvider (the binary's OTLP log exporter), so a log pipeline can
// rebuild each task's state transitions and tell a stuck one. Every record
// has its event name as the record's EventName and as the attribute
// event.name, the task's correlation attributes (TaskLogAttrs), and the
// trace context of the span it belongs to when there is one. Nothing is
// built when the provider's logger is not enabled (the default global
// provider is a no-op).
const (
	EventNameEnqueued        = "backstop.task.enqueued"
	EventNameClaimed         = "backstop.task.claimed"
	EventNameStarted         = "backstop.task.started"
	EventNameSucceeded       = "backstop.task.succeeded"
	EventNameRetryScheduled  = "backstop.task.retry_scheduled"
	EventNameDeadLettered    = "backstop.task.dead_lettered"
	EventNameSnoozed         = "backstop.task.snoozed"
	EventNameCanceled        = "backstop.task.canceled"
	EventNameReleased        = "backstop.task.released"
	EventNameReplayRequested = "backstop.dlq.replay_requested"
	EventNameReplayed        = "backstop.dlq.replayed"
	EventNameReplayFailed    = "backstop.dlq.replay_failed"
)

// eventBodies are the records' bodies, one short sentence per event.
var eventBodies = map[string]string{
	EventNameEnqueued:        "task enqueued",
	EventNameClaimed:         "task claimed",
	EventNameStarted:         "task attempt started",
	EventNameSucceeded:       "task succeeded",
	EventNameRetryScheduled:  "attempt failed; retry scheduled",
	EventNameDeadLettered:    "task dead-lettered",
	EventNameSnoozed:         "attempt snoozed",
	EventNameCanceled:        "task canceled",
	EventNameReleased:        "task released",
	EventNameReplayRequested: "dead letter replay requested",
	EventNameReplayed:        "dead letter replayed",
	EventNameReplayFailed:    "dead letter replay failed",
}

// eventsLogger is the logger of the log events (nil provider: otel's
// global one).
func eventsLogger(lp otellog.LoggerProvider) otellog.Logger {
	if lp == nil {
		lp = global.GetLoggerProvider()
	}
	return lp.Logger(instrumentationName)
}

// logEvent writes one log event about tk: its name, the task's
// correlation attributes and extra, at the severity sev, in the trace
// context sc (when valid) or ctx's.
func (t *Telemetry) logEvent(ctx context.Context, sc trace.SpanContext, name string, sev otellog.Severity, at time.Time, tk *Task, extra ...attribute.KeyValue) {
	if t.events == nil {
		return
	}
	if sc.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, sc)
	}
	if !t.events.Enabled(ctx, otellog.EnabledParameters{Severity: sev, EventName: name}) {
		return
	}
	var r otellog.Record
	r.SetEventName(name)
	if at.IsZero() {
		at = time.Now()
	}
	r.SetTimestamp(at)
	r.SetObservedTimestamp(time.Now())
	r.SetSeverity(sev)
	r.SetSeverityText(sevText(sev))
	r.SetBody(attribute.StringValue(eventBodies[name]))
	kv := make([]attribute.KeyValue, 0, 12+len(extra))
	kv = append(kv, attribute.String("event.name", name))
	kv = append(kv, taskLogKeyValues(tk)...)
	kv = append(kv, extra...)
	r.AddAttributes(kv...)
	t.events.Emit(ctx, r)
}

func sevText(s otellog.Severity) string {
	switch {
	case s >= otellog.SeverityError:
		return "ERROR"
	case s >= otellog.SeverityWarn:
		return "WARN"
	}
	return "INFO"
}

// taskLogKeyValues are TaskLogAttrs as log attributes.
func taskLogKeyValues(tk *Task) []attribute.KeyValue {
	args := TaskLogAttrs(tk)
	kv := make([]attribute.KeyValue, 0, len(args)/2)
	for i := 0; i+1 < len(args); i += 2 {
		k, _ := args[i].(string)
		switch v := args[i+1].(type) {
		case string:
			kv = append(kv, attribute.String(k, v))
		case int:
			kv = append(kv, attribute.Int(k, v))
		}
	}
	return kv
}

// eventsOn says whether log events are written at all (cheap: checked
// before a loop builds anything).
func (t *Telemetry) eventsOn(ctx context.Context) bool {
	return t.events != nil && t.events.Enabled(ctx, otellog.EnabledParameters{Severity: otellog.SeverityInfo})
}

// Started writes the event of an attempt that began: in-process when its
// handler is about to run (ctx carries its span), remote when the claim
// handing it out is answered.
func (t *Telemetry) Started(ctx context.Context, tk *Task, span trace.Span) {
	if !t.eventsOn(ctx) {
		return
	}
	var sc trace.SpanContext
	if span != nil {
		sc = span.SpanContext()
	}
	t.logEvent(ctx, sc, EventNameStarted, otellog.SeverityInfo, attemptStart(tk, time.Time{}), tk,
		attribute.String("worker_id", tk.WorkerID))
}

// claimedEvents writes the claimed event of each task of a claim round.
func (t *Telemetry) claimedEvents(ctx context.Context, tasks []*Task, workerID string, now time.Time) {
	if !t.eventsOn(ctx) {
		return
	}
	for _, tk := range tasks {
		extra := []attribute.KeyValue{attribute.String("worker_id", workerID), attribute.Int("max_attempts", tk.MaxAttempts)}
		if tk.LeaseExpiresAt != nil {
			extra = append(extra, attribute.String("lease_expires_at", store.EventTime(*tk.LeaseExpiresAt)))
		}
		t.logEvent(ctx, t.creationContext(tk), EventNameClaimed, otellog.SeverityInfo, now, tk, extra...)
	}
}

// enqueuedEvent writes the enqueued event of one task (sc: its send or
// dispatch span).
func (t *Telemetry) enqueuedEvent(ctx context.Context, sc trace.SpanContext, tk *Task, merged bool) {
	t.logEvent(ctx, sc, EventNameEnqueued, otellog.SeverityInfo, tk.CreatedAt, tk,
		attribute.Bool("merged", merged), attribute.String("run_at", store.EventTime(tk.RunAt)),
		attribute.Int("attempts", tk.Attempt), attribute.Int("max_attempts", tk.MaxAttempts))
}

// settledEvent writes what an applied settlement did to the task: its
// success (with the attempt's duration), the retry it scheduled, its dead
// letter, or its snooze, cancel or release.
func (t *Telemetry) settledEvent(span trace.Span, tk *Task, started time.Time, s *store.Settlement) {
	ctx := context.Background()
	if !t.eventsOn(ctx) {
		return
	}
	var sc trace.SpanContext
	if span != nil {
		sc = span.SpanContext()
	}
	d := max(s.FinishedAt.Sub(started), 0)
	extra := []attribute.KeyValue{attribute.String("outcome", string(s.Outcome)),
		attribute.Float64("duration_seconds", d.Seconds()), attribute.Int64("duration_ms", d.Milliseconds())}
	if s.Error != "" {
		extra = append(extra, attribute.String("error", store.TruncateError(s.Error)))
	}
	name, sev := "", otellog.SeverityInfo
	switch {
	case s.State == bt.StateDead:
		name, sev = EventNameDeadLettered, otellog.SeverityWarn
		extra = append(extra, attribute.String("reason", string(s.DeadReason)), attribute.Bool("too_complex", taskTooComplex(tk)))
	case s.State == bt.StateSucceeded:
		name = EventNameSucceeded
	case s.State == bt.StateCanceled:
		name = EventNameCanceled
	case s.Outcome == bt.OutcomeSnoozed:
		name = EventNameSnoozed
	case s.Outcome == bt.OutcomeReleased:
		name = EventNameReleased
	case s.State == bt.StateScheduled || s.State == bt.StatePending:
		name = EventNameRetryScheduled
		extra = append(extra, attribute.String("run_at", store.EventTime(s.RunAt)))
	default:
		return
	}
	t.logEvent(ctx, sc, name, sev, s.FinishedAt, tk, extra...)
}

// SettledEvent is settledEvent for a settlement counted elsewhere or not
// at all (an in-process attempt released on shutdown); a zero started is
// the task's attempted_at.
func (t *Telemetry) SettledEvent(span trace.Span, tk *Task, started time.Time, s *store.Settlement) {
	if started.IsZero() {
		started = attemptStart(tk, s.FinishedAt)
	}
	t.settledEvent(span, tk, started, s)
}

// deadlineEvent writes the dead-letter event of a waiting task whose
// deadline passed (no attempt ran).
func (t *Telemetry) deadlineEvent(ctx context.Context, tk *Task, s *store.Settlement) {
	t.logEvent(ctx, t.creationContext(tk), EventNameDeadLettered, otellog.SeverityWarn, s.FinishedAt, tk,
		attribute.String("reason", string(s.DeadReason)), attribute.Bool("too_complex", taskTooComplex(tk)))
}

// ReplayEvents writes the events of one dead-letter replay that was
// attempted: requested, then replayed (tk: the task that will run) or
// failed (err; tk: the dead letter when it was read, else nil and id
// names it).
func (t *Telemetry) ReplayEvents(ctx context.Context, id string, tk *Task, err error) {
	if !t.eventsOn(ctx) {
		return
	}
	if tk == nil {
		tk = &Task{ID: id}
	}
	t.logEvent(ctx, trace.SpanContext{}, EventNameReplayRequested, otellog.SeverityInfo, time.Time{}, tk,
		attribute.String("replay_of", id))
	if err != nil {
		t.logEvent(ctx, trace.SpanContext{}, EventNameReplayFailed, otellog.SeverityWarn, time.Time{}, tk,
			attribute.String("replay_of", id), attribute.String("error", store.TruncateError(err.Error())))
		return
	}
	t.logEvent(ctx, trace.SpanContext{}, EventNameReplayed, otellog.SeverityInfo, time.Time{}, tk,
		attribute.String("replay_of", id))
}

// stepsEnqueuedEvents writes the enqueued events of the step tasks
// committed plans enqueued, each in its dispatch span's trace.
func (t *Telemetry) stepsEnqueuedEvents(ctx context.Context, rt *runTrace, tasks []*Task) {
	if len(tasks) == 0 || !t.eventsOn(ctx) {
		return
	}
	spans := make(map[string]trace.SpanContext, len(rt.dispatch))
	for _, d := range rt.dispatch {
		spans[d.taskID] = d.span.SpanContext()
	}
	for _, tk := range tasks {
		t.enqueuedEvent(ctx, spans[tk.ID], tk, false)
	}
}
