package testlog

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	sdklog "go.opentelemetry.io/otel/sdk/log"
)

// OTel keeps the OpenTelemetry log records a LoggerProvider exports: a
// real SDK pipeline (simple processor) ending in memory.
type OTel struct {
	mu   sync.Mutex
	recs []sdklog.Record
}

// NewOTel is a LoggerProvider exporting to a new OTel.
func NewOTel() (*OTel, *sdklog.LoggerProvider) {
	o := &OTel{}
	return o, sdklog.NewLoggerProvider(sdklog.WithProcessor(sdklog.NewSimpleProcessor(o)))
}

func (o *OTel) Export(_ context.Context, rs []sdklog.Record) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range rs {
		o.recs = append(o.recs, r.Clone())
	}
	return nil
}
func (o *OTel) Shutdown(context.Context) error   { return nil }
func (o *OTel) ForceFlush(context.Context) error { return nil }

// Event is one exported event record: its name, attributes (as text) and
// trace context.
type Event struct {
	Name         string
	Attrs        map[string]string
	TraceID      string
	SpanID       string
	SeverityText string
	Body         string
}

// Events are the exported records with an event name, in order.
func (o *OTel) Events() []Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Event
	for _, r := range o.recs {
		if r.EventName() == "" {
			continue
		}
		e := Event{Name: r.EventName(), Attrs: map[string]string{}, SeverityText: r.SeverityText(), Body: r.Body().Emit()}
		r.WalkAttributes(func(kv attribute.KeyValue) bool {
			e.Attrs[string(kv.Key)] = kv.Value.Emit()
			return true
		})
		if r.TraceID().IsValid() {
			e.TraceID, e.SpanID = r.TraceID().String(), r.SpanID().String()
		}
		out = append(out, e)
	}
	return out
}

// EventsOf are the events about one task (attribute task_id), by name.
func (o *OTel) EventsOf(taskID string) map[string][]Event {
	out := map[string][]Event{}
	for _, e := range o.Events() {
		if e.Attrs["task_id"] == taskID {
			out[e.Name] = append(out[e.Name], e)
		}
	}
	return out
}
