package engine

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// WithSpan makes every record written through l name the attempt's span:
// trace_id and span_id attributes (JSON logs), and the span in the record's
// context when the caller passed none, so a handler bridged to
// OpenTelemetry logs (otelslog) puts the record in the attempt's trace.
// A nil or invalid span leaves l as it is.
func WithSpan(l *slog.Logger, span trace.Span) *slog.Logger {
	if span == nil || !span.SpanContext().IsValid() {
		return l
	}
	sc := span.SpanContext()
	h := l.Handler().WithAttrs([]slog.Attr{slog.String("trace_id", sc.TraceID().String()),
		slog.String("span_id", sc.SpanID().String())})
	return slog.New(spanHandler{Handler: h, sc: sc})
}

// spanHandler gives records without a span in their context the
// attempt's span.
type spanHandler struct {
	slog.Handler
	sc trace.SpanContext
}

func (h spanHandler) Handle(ctx context.Context, r slog.Record) error {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, h.sc)
	}
	return h.Handler.Handle(ctx, r)
}

func (h spanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return spanHandler{Handler: h.Handler.WithAttrs(as), sc: h.sc}
}

func (h spanHandler) WithGroup(name string) slog.Handler {
	return spanHandler{Handler: h.Handler.WithGroup(name), sc: h.sc}
}
