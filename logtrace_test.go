package backstop

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/bridges/otelslog"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testlog"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// logExporter keeps the OpenTelemetry log records it is given.
type logExporter struct {
	mu   sync.Mutex
	recs []sdklog.Record
}

func (e *logExporter) Export(_ context.Context, rs []sdklog.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range rs {
		e.recs = append(e.recs, r.Clone())
	}
	return nil
}
func (e *logExporter) Shutdown(context.Context) error   { return nil }
func (e *logExporter) ForceFlush(context.Context) error { return nil }

// TestHandlerLogsCarrySpan: every record written through the handler's
// logger (its own lines and the worker's about the attempt) carries the
// trace_id and span_id of the attempt's span next to the task's ids, in
// the JSON output and, through the otelslog bridge, as the OpenTelemetry
// log record's trace context.
func TestHandlerLogsCarrySpan(t *testing.T) {
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := &testlog.Buffer{}
	exp := &logExporter{}
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(sdklog.NewSimpleProcessor(exp)))
	logger := slog.New(slog.NewMultiHandler(slog.NewJSONHandler(out, nil),
		otelslog.NewHandler("test", otelslog.WithLoggerProvider(lp))))
	sr := tracetest.NewSpanRecorder()
	c, err := NewClient(s, &Config{Logger: logger, Retry: &RetryPolicy{Schedule: []bt.Duration{0}},
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"q": 1}, PollInterval: 20 * time.Millisecond, MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", HandlerFunc(func(ctx context.Context, tk *Task) error {
		Logger(ctx).Info("handler says hello", "n", tk.Attempt)
		if tk.Attempt == 1 {
			return errors.New("flaky")
		}
		return nil
	}))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := c.Enqueue(context.Background(), EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: 2,
		Attributes: map[string]string{"run_id": "r1", "plan_hash": "p1"}})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the task to succeed", func() bool {
		tk, err := c.Get(context.Background(), r.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		return tk.State == bt.StateSucceeded
	})
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	spans := map[string]sdktrace.ReadOnlySpan{} // by execution id
	for _, sp := range sr.Ended() {
		for _, kv := range sp.Attributes() {
			if kv.Key == "backstop.execution_id" {
				spans[kv.Value.AsString()] = sp
			}
		}
	}
	if len(spans) != 2 {
		t.Fatalf("%d process spans, want 2", len(spans))
	}
	var hello, retry int
	for _, l := range out.Records(t) {
		if l["task_id"] != r.Task.ID {
			continue
		}
		switch l["msg"] {
		case "handler says hello":
			hello++
		case "attempt failed; retry scheduled":
			retry++
		}
		sp := spans[l["execution_id"].(string)]
		if sp == nil {
			t.Fatalf("log line %v: no span for its execution", l)
		}
		if l["trace_id"] != sp.SpanContext().TraceID().String() || l["span_id"] != sp.SpanContext().SpanID().String() {
			t.Errorf("log line %v: trace_id/span_id are not the attempt span's %s/%s", l, sp.SpanContext().TraceID(), sp.SpanContext().SpanID())
		}
		if l["run_id"] != "r1" || l["plan_hash"] != "p1" || l["queue"] != "q" || l["kind"] != "k" {
			t.Errorf("log line %v lacks the task's ids", l)
		}
	}
	if hello != 2 || retry != 1 {
		t.Errorf("%d hello lines and %d retry lines, want 2 and 1", hello, retry)
	}

	exp.mu.Lock()
	defer exp.mu.Unlock()
	var bridged int
	for _, rec := range exp.recs {
		if rec.Body().AsString() != "handler says hello" {
			continue
		}
		bridged++
		ok := false
		for _, sp := range spans {
			if rec.TraceID() == sp.SpanContext().TraceID() && rec.SpanID() == sp.SpanContext().SpanID() {
				ok = true
			}
		}
		if !ok {
			t.Errorf("OpenTelemetry log record has trace %s span %s: not an attempt's span", rec.TraceID(), rec.SpanID())
		}
	}
	if bridged != 2 {
		t.Errorf("%d bridged records, want 2", bridged)
	}
}
