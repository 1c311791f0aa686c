package backstop

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testmetric"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// telHarness is a client and worker on a real SQLite file whose metrics go
// to a manual reader and whose spans go to an in-memory recorder.
type telHarness struct {
	t      *testing.T
	c      *Client
	w      *Worker
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

func newTelHarness(t *testing.T, kind string, h HandlerFunc) *telHarness {
	t.Helper()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	sr := tracetest.NewSpanRecorder()
	c, err := NewClient(s, &Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)),
		Retry:          &RetryPolicy{Schedule: []bt.Duration{0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"q": 1}, Lease: time.Second, HeartbeatInterval: 100 * time.Millisecond,
		PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle(kind, h)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return &telHarness{t: t, c: c, w: w, reader: reader, spans: sr}
}

// waitFor polls the task until it reaches state (no timing assertion:
// poll's deadline only bounds a broken worker).
func (h *telHarness) waitFor(id string, state bt.State) *Task {
	h.t.Helper()
	var tk *Task
	testwait.For(h.t, "task "+id+" to be "+string(state), func() bool {
		var err error
		if tk, err = h.c.Get(context.Background(), id); err != nil {
			h.t.Fatal(err)
		}
		// the worker records the attempt once its settlement committed: read
		// metrics after Stop, which waits for the settle batches
		return tk.State == state
	})
	return tk
}

func (h *telHarness) enqueue(p EnqueueParams) string {
	h.t.Helper()
	r, err := h.c.Enqueue(context.Background(), p)
	if err != nil {
		h.t.Fatal(err)
	}
	return r.Task.ID
}

// metrics collects the current values (testmetric.Collect).
func (h *telHarness) metrics() map[string]map[string]int64 {
	h.t.Helper()
	return testmetric.Collect(h.t, h.reader)
}

// expect checks exact metric values (testmetric.Expect).
func expect(t *testing.T, got map[string]map[string]int64, want map[string]map[string]int64) {
	t.Helper()
	testmetric.Expect(t, got, want)
}

const qk = "kind=k,queue=q"

func TestTelemetrySuccess(t *testing.T) {
	h := newTelHarness(t, "k", func(ctx context.Context, _ *Task) error { return nil })
	id := h.enqueue(EnqueueParams{Queue: "q", Kind: "k", Attributes: map[string]string{"run_id": "r1", "plan_hash": "ph"}})
	h.waitFor(id, bt.StateSucceeded)
	_ = h.w.Stop(context.Background())
	m := h.metrics()
	expect(t, m, map[string]map[string]int64{
		"backstop.tasks.enqueued":            {"kind=k,merged=false,queue=q": 1},
		"backstop.attempts":                  {"kind=k,outcome=succeeded,queue=q": 1},
		"backstop.task.duration":             {"kind=k,outcome=succeeded,queue=q": 1},
		"backstop.queue.wait":                {qk: 1},
		"backstop.retries":                   {},
		"backstop.dead_letters":              {},
		"messaging.client.sent.messages":     {"messaging.destination.name=q,messaging.operation.name=send,messaging.system=backstop": 1},
		"messaging.client.consumed.messages": {"messaging.destination.name=q,messaging.operation.name=receive,messaging.system=backstop": 1},
		"messaging.process.duration":         {"messaging.destination.name=q,messaging.operation.name=process,messaging.system=backstop": 1},
	})
	if m["backstop.claims"]["queue=q,result=ok"] != 1 {
		t.Errorf("claims ok = %v, want 1", m["backstop.claims"])
	}

	// Spans: a producer span whose context is the task's traceparent, and
	// a consumer span per attempt, its child and linked to it.
	spans := h.spans.Ended()
	var send, proc sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.Name() {
		case "send q":
			send = s
		case "process q":
			proc = s
		}
	}
	if send == nil || proc == nil {
		t.Fatalf("spans %v: want send q and process q", spanNames(spans))
	}
	if send.SpanKind() != trace.SpanKindProducer || proc.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kinds %v %v", send.SpanKind(), proc.SpanKind())
	}
	tk, _ := h.c.Get(context.Background(), id)
	wantTP := "00-" + send.SpanContext().TraceID().String() + "-" + send.SpanContext().SpanID().String() + "-01"
	if tk.TraceParent != wantTP {
		t.Errorf("stored traceparent %q, want %q", tk.TraceParent, wantTP)
	}
	if len(proc.Links()) != 1 || proc.Links()[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("process span links %v, want the send span", proc.Links())
	}
	if proc.Parent().SpanID() != send.SpanContext().SpanID() {
		t.Errorf("process span parent %v, want the send span", proc.Parent())
	}
	attrs := map[string]string{}
	for _, kv := range proc.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range map[string]string{"messaging.system": "backstop", "messaging.destination.name": "q",
		"messaging.message.id": id, "backstop.attempt": "1", "backstop.outcome": "succeeded", "run_id": "r1", "plan_hash": "ph"} {
		if attrs[k] != v {
			t.Errorf("process span %s = %q, want %q", k, attrs[k], v)
		}
	}
	if proc.Status().Code == codes.Error {
		t.Errorf("successful attempt has error status")
	}
}

func spanNames(ss []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name())
	}
	return out
}

func TestTelemetryRetryThenSuccess(t *testing.T) {
	h := newTelHarness(t, "k", func(ctx context.Context, tk *Task) error {
		if tk.Attempt == 1 {
			return errors.New("flaky")
		}
		return nil
	})
	id := h.enqueue(EnqueueParams{Queue: "q", Kind: "k"})
	h.waitFor(id, bt.StateSucceeded)
	_ = h.w.Stop(context.Background())
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.attempts":     {"kind=k,outcome=transient_error,queue=q": 1, "kind=k,outcome=succeeded,queue=q": 1},
		"backstop.retries":      {qk: 1},
		"backstop.dead_letters": {},
	})
	var errSpans int
	for _, s := range h.spans.Ended() {
		if s.Name() == "process q" && s.Status().Code == codes.Error {
			errSpans++
			found := false
			for _, kv := range s.Attributes() {
				if kv.Key == "error.type" && kv.Value.AsString() == "transient_error" {
					found = true
				}
			}
			if !found {
				t.Errorf("failed attempt span lacks error.type=transient_error: %v", s.Attributes())
			}
		}
	}
	if errSpans != 1 {
		t.Errorf("%d error spans, want 1", errSpans)
	}
}

func TestTelemetryExhaustedToDLQThenReplayAndDiscard(t *testing.T) {
	h := newTelHarness(t, "k", func(ctx context.Context, tk *Task) error { return errors.New("always") })
	id := h.enqueue(EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: 2})
	h.waitFor(id, bt.StateDead)
	_ = h.w.Stop(context.Background())
	ctx := context.Background()
	if _, err := h.c.Replay(ctx, ReplayParams{ID: id, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Replay(ctx, ReplayParams{ID: "no-such-task"}); err == nil {
		t.Fatal("replay of an unknown task succeeded")
	}
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.attempts":     {"kind=k,outcome=transient_error,queue=q": 2},
		"backstop.retries":      {qk: 1},
		"backstop.dead_letters": {qk + ",reason=attempts_exhausted,too_complex=false": 1},
		"backstop.replays":      {"result=ok": 1, "result=error": 1},
	})
}

func TestTelemetryDiscard(t *testing.T) {
	h := newTelHarness(t, "k", func(ctx context.Context, tk *Task) error { return Permanent(errors.New("bad")) })
	id := h.enqueue(EnqueueParams{Queue: "q", Kind: "k"})
	h.waitFor(id, bt.StateDead)
	_ = h.w.Stop(context.Background())
	if _, err := h.c.Discard(context.Background(), DiscardParams{ID: id, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.attempts":     {"kind=k,outcome=permanent_error,queue=q": 1},
		"backstop.dead_letters": {qk + ",reason=permanent_error,too_complex=false": 1},
		"backstop.discards":     {qk: 1},
	})
}

func TestTelemetryTimeout(t *testing.T) {
	h := newTelHarness(t, "k", func(ctx context.Context, tk *Task) error {
		<-ctx.Done()
		return ctx.Err()
	})
	id := h.enqueue(EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: 1, Timeout: 20 * time.Millisecond})
	h.waitFor(id, bt.StateDead)
	_ = h.w.Stop(context.Background())
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.attempts":     {"kind=k,outcome=timeout,queue=q": 1},
		"backstop.retries":      {},
		"backstop.dead_letters": {qk + ",reason=attempts_exhausted,too_complex=false": 1},
	})
}

func TestTelemetryCancel(t *testing.T) {
	started := make(chan struct{})
	h := newTelHarness(t, "k", func(ctx context.Context, tk *Task) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	id := h.enqueue(EnqueueParams{Queue: "q", Kind: "k"})
	<-started
	if _, err := h.c.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	h.waitFor(id, bt.StateCanceled)
	_ = h.w.Stop(context.Background())
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.attempts":     {"kind=k,outcome=canceled,queue=q": 1},
		"backstop.retries":      {},
		"backstop.dead_letters": {},
	})
}

func TestTelemetryRedrive(t *testing.T) {
	h := newTelHarness(t, "k", func(ctx context.Context, tk *Task) error { return Permanent(errors.New("bad")) })
	a := h.enqueue(EnqueueParams{Queue: "q", Kind: "k"})
	b := h.enqueue(EnqueueParams{Queue: "q", Kind: "k"})
	h.waitFor(a, bt.StateDead)
	h.waitFor(b, bt.StateDead)
	_ = h.w.Stop(context.Background())
	pr, err := h.c.Redrive(context.Background(), RedriveParams{Filter: ListParams{Queue: "q"}, Delay: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Replayed != 2 {
		t.Fatalf("redrive %+v, want 2 replayed", pr)
	}
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.dead_letters": {qk + ",reason=permanent_error,too_complex=false": 2},
		"backstop.replays":      {"result=ok": 2},
	})
}
