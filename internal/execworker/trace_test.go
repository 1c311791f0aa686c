package execworker_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/backstophq/backstop/internal/execworker"
)

// The program gets TRACEPARENT of the span in the attempt's context (the
// attempt's consumer span), never one inherited from the worker's own
// environment.
func TestTraceParentEnv(t *testing.T) {
	h := newHandler(t, execworker.Config{Command: shell(`printf '%s|%s' "$TRACEPARENT" "$TRACESTATE"`),
		Env: []string{"PATH=/usr/bin:/bin", "TRACEPARENT=00-11111111111111111111111111111111-2222222222222222-01", "TRACESTATE=stale=1"}})
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	r := h.Run(trace.ContextWithSpanContext(context.Background(), sc), testTask())
	if r.Err != nil {
		t.Fatal(r.Err, r.Output)
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01|"; r.Output != want {
		t.Errorf("program saw %q, want %q", r.Output, want)
	}
	// No span: no TRACEPARENT at all (not the inherited one).
	r = h.Run(context.Background(), testTask())
	if r.Output != "|" {
		t.Errorf("without a span the program saw %q, want nothing", r.Output)
	}
}
