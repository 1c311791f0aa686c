package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestErrorsAlwaysExported: with a sampling ratio of 0 nothing is sampled,
// yet a span that ends in error is exported (marked sampled) and its
// unsampled siblings are not; a sampled parent's children follow it.
func TestErrorsAlwaysExported(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(Sampler(0)),
		sdktrace.WithSpanProcessor(ErrorKeeping(sdktrace.NewSimpleSpanProcessor(exp))))
	tr := tp.Tracer("test")
	ctx := context.Background()

	_, ok := tr.Start(ctx, "ok")
	ok.End()
	_, bad := tr.Start(ctx, "bad")
	if bad.SpanContext().IsSampled() {
		t.Fatal("ratio 0 sampled a span")
	}
	if !bad.IsRecording() {
		t.Fatal("an unsampled span is not recorded: its error could not be kept")
	}
	bad.SetStatus(codes.Error, "boom")
	bad.End()

	got := exp.GetSpans()
	if len(got) != 1 || got[0].Name != "bad" || got[0].Status.Code != codes.Error || !got[0].SpanContext.IsSampled() {
		t.Fatalf("exported %+v, want only the error span, marked sampled", got)
	}

	// A sampled remote parent (the producer's traceparent) is followed
	// even at ratio 0.
	exp.Reset()
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled, Remote: true})
	_, child := tr.Start(trace.ContextWithRemoteSpanContext(ctx, parent), "child")
	child.End()
	if got := exp.GetSpans(); len(got) != 1 || got[0].Name != "child" {
		t.Fatalf("exported %v, want the child of a sampled parent", got)
	}

	// Ratio 1: everything.
	exp.Reset()
	tp1 := sdktrace.NewTracerProvider(sdktrace.WithSampler(Sampler(1)),
		sdktrace.WithSpanProcessor(ErrorKeeping(sdktrace.NewSimpleSpanProcessor(exp))))
	_, s := tp1.Tracer("test").Start(ctx, "any")
	s.End()
	if len(exp.GetSpans()) != 1 {
		t.Fatal("ratio 1 did not export")
	}
}

func TestWants(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cases := []struct {
		env  func(string) string
		want bool
	}{
		{env(), false},
		{env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), true},
		{env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces"), true},
		{env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_TRACES_EXPORTER", "none"), false},
		{env("OTEL_TRACES_EXPORTER", "console"), true},
		{env("OTEL_METRICS_EXPORTER", "otlp"), false}, // another signal
	}
	for i, c := range cases {
		if got := wants(c.env, "TRACES"); got != c.want {
			t.Errorf("case %d: wants = %v, want %v", i, got, c.want)
		}
	}
}

// TestNoOTLPByDefault: without OTEL_* variables nothing is exported over
// OTLP (autoexport alone would default to localhost:4318).
func TestNoOTLPByDefault(t *testing.T) {
	tel, err := Setup(context.Background(), Options{Getenv: func(string) string { return "" }, LogOutput: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if tel.OTLP.Traces || tel.OTLP.Metrics || tel.OTLP.Logs {
		t.Fatalf("OTLP on without being asked: %+v", tel.OTLP)
	}
	if tel.MeterProvider == nil {
		t.Fatal("metrics off by default")
	}
	off, err := Setup(context.Background(), Options{MetricsDisabled: true, Getenv: func(string) string { return "" }, LogOutput: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Shutdown(context.Background())
	if off.MeterProvider != nil {
		t.Fatal("MetricsDisabled left a meter provider")
	}
}

// TestOTLPExport: with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a receiver
// (loopback), traces, metrics and logs all arrive there over OTLP/HTTP,
// and the JSON log lines still go to the log output.
func TestOTLPExport(t *testing.T) {
	var mu sync.Mutex
	paths := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	var logs bytes.Buffer
	ctx := context.Background()
	tel, err := Setup(ctx, Options{LogOutput: &logs})
	if err != nil {
		t.Fatal(err)
	}
	if !tel.OTLP.Traces || !tel.OTLP.Metrics || !tel.OTLP.Logs {
		t.Fatalf("OTLP not on for every signal: %+v", tel.OTLP)
	}
	_, span := tel.TracerProvider.Tracer("test").Start(ctx, "send q")
	span.End()
	c, err := tel.MeterProvider.Meter("test").Int64Counter("backstop.test")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, 1)
	tel.Logger.Info("task settled", "task_id", "t1", "queue", "q")
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"/v1/traces", "/v1/metrics", "/v1/logs"} {
		if paths[p] == 0 {
			t.Errorf("nothing posted to %s (got %v)", p, paths)
		}
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(logs.String())), &rec); err != nil || rec["task_id"] != "t1" || rec["msg"] != "task settled" {
		t.Errorf("JSON log line %q (%v)", logs.String(), err)
	}
}

// TestSamplerForce: at ratio 0 a span is recorded but not sampled, unless
// it carries backstop.trace=true (a forced task or run); its children are
// then sampled through its context.
func TestSamplerForce(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(Sampler(0)))
	tr := tp.Tracer("t")
	_, plain := tr.Start(context.Background(), "plain")
	ctx, forced := tr.Start(context.Background(), "forced", trace.WithAttributes(attribute.Bool(ForceAttribute, true)))
	_, child := tr.Start(ctx, "child")
	if plain.SpanContext().IsSampled() || !plain.IsRecording() {
		t.Error("a plain span at ratio 0: want recorded, not sampled")
	}
	if !forced.SpanContext().IsSampled() || !child.SpanContext().IsSampled() {
		t.Error("a forced span and its child: want sampled")
	}
}
