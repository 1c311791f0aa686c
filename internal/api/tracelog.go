package api

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceArgs are the trace_id and span_id log attributes of a span (none
// when sc is not valid): a server log line about an attempt names the
// attempt's span, one about an enqueue the task's creation span, so logs
// and traces join.
func traceArgs(sc trace.SpanContext) []any {
	if !sc.IsValid() {
		return nil
	}
	return []any{"trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String()}
}

// traceParentArgs is traceArgs of a W3C traceparent.
func traceParentArgs(tp string) []any {
	if tp == "" {
		return nil
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return traceArgs(trace.SpanContextFromContext(ctx))
}
