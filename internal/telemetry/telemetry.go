// Package telemetry sets up the binary's OpenTelemetry providers: one
// instrumentation, exported as a Prometheus /metrics endpoint (on its own
// registry) and over OTLP when the standard OTEL_* variables (or the config
// file's telemetry.otlp_endpoint) ask for it; traces sampled by a
// parent-based ratio with errors always kept; slog JSON logs, bridged to
// OpenTelemetry logs when OTLP logs are on.
package telemetry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/bridges/otelslog"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/log/global"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/backstophq/backstop/internal/traceids"
)

// Options says what to set up. The zero value: metrics on (Prometheus
// only), every trace sampled, OTLP only when OTEL_* variables ask.
type Options struct {
	// Service names the process in resource attributes (service.name).
	Service string
	// SampleRatio of traces started here (parent-based: a sampled parent
	// is followed). Errors are exported regardless. nil: 1.
	SampleRatio *float64
	// OTLPEndpoint, when set and OTEL_EXPORTER_OTLP_ENDPOINT is not,
	// turns OTLP export on for traces, metrics and logs.
	OTLPEndpoint string
	// MetricsDisabled: no meter provider (the library records nothing).
	MetricsDisabled bool
	// LogOutput receives the JSON logs. nil: stderr.
	LogOutput io.Writer
	// LogLevel. Default: Info.
	LogLevel slog.Level
	// Getenv reads the environment (tests replace it). nil: os.Getenv.
	Getenv func(string) string
}

// Telemetry is what Setup made.
type Telemetry struct {
	MeterProvider *sdkmetric.MeterProvider // nil when metrics are off
	// TracerProvider is a no-op one when no trace exporter is configured:
	// spans nobody exports are not built.
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
	// LoggerProvider writes OpenTelemetry logs: the bridged slog records
	// and the library's log events. nil when OTLP logs are off.
	LoggerProvider *sdklog.LoggerProvider
	Registry       *prometheus.Registry
	// OTLP reports which signals go out over OTLP.
	OTLP struct{ Traces, Metrics, Logs bool }

	shutdown []func(context.Context) error
}

// Setup builds the providers. It does not install them as otel globals;
// call Install for that.
func Setup(ctx context.Context, o Options) (*Telemetry, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if o.OTLPEndpoint != "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		// autoexport reads the standard variable; the config file's value
		// is its default.
		if err := os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", o.OTLPEndpoint); err != nil {
			return nil, err
		}
		prev := getenv
		getenv = func(k string) string {
			if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
				return o.OTLPEndpoint
			}
			return prev(k)
		}
	}
	t := &Telemetry{Registry: prometheus.NewRegistry()}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", cmpOr(o.Service, "backstop"))))
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Telemetry, error) {
		_ = t.Shutdown(context.Background())
		return nil, err
	}

	// Metrics: Prometheus always (unless off), OTLP when asked.
	if !o.MetricsDisabled {
		exp, err := otelprom.New(otelprom.WithRegisterer(t.Registry), otelprom.WithoutScopeInfo())
		if err != nil {
			return fail(err)
		}
		opts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(exp)}
		if wants(getenv, "METRICS") {
			r, err := autoexport.NewMetricReader(ctx)
			if err != nil {
				return fail(err)
			}
			if !autoexport.IsNoneMetricReader(r) {
				opts = append(opts, sdkmetric.WithReader(r))
				t.OTLP.Metrics = true
			}
		}
		t.MeterProvider = sdkmetric.NewMeterProvider(opts...)
		t.shutdown = append(t.shutdown, t.MeterProvider.Shutdown)
	}

	// Traces.
	ratio := 1.0
	if o.SampleRatio != nil {
		ratio = *o.SampleRatio
	}
	t.TracerProvider = noop.NewTracerProvider()
	if wants(getenv, "TRACES") {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return fail(err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(Sampler(ratio)),
				sdktrace.WithIDGenerator(traceids.Generator()),
				sdktrace.WithSpanProcessor(ErrorKeeping(sdktrace.NewBatchSpanProcessor(exp))))
			t.TracerProvider = tp
			t.shutdown = append(t.shutdown, tp.Shutdown)
			t.OTLP.Traces = true
		}
	}

	// Logs: JSON always; OpenTelemetry logs as well when asked.
	out := o.LogOutput
	if out == nil {
		out = os.Stderr
	}
	var h slog.Handler = slog.NewJSONHandler(out, &slog.HandlerOptions{Level: o.LogLevel})
	if wants(getenv, "LOGS") {
		exp, err := autoexport.NewLogExporter(ctx)
		if err != nil {
			return fail(err)
		}
		if !autoexport.IsNoneLogExporter(exp) {
			lp := sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(sdklog.NewBatchProcessor(exp)))
			t.shutdown = append(t.shutdown, lp.Shutdown)
			t.LoggerProvider = lp
			h = slog.NewMultiHandler(h, minLevel{otelslog.NewHandler("github.com/backstophq/backstop", otelslog.WithLoggerProvider(lp)), o.LogLevel})
			t.OTLP.Logs = true
		}
	}
	t.Logger = slog.New(h)
	return t, nil
}

// wants says whether a signal ("TRACES", "METRICS", "LOGS") is to be
// exported through autoexport: its OTEL_<SIGNAL>_EXPORTER is set, or an
// OTLP endpoint is. Without either nothing is exported (autoexport alone
// would default to OTLP on localhost).
func wants(getenv func(string) string, signal string) bool {
	if v := getenv("OTEL_" + signal + "_EXPORTER"); v != "" {
		return v != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Install makes these providers otel's globals (with the W3C trace
// context propagator) and the logger slog's default.
func (t *Telemetry) Install() {
	if t.MeterProvider != nil {
		otel.SetMeterProvider(t.MeterProvider)
	}
	otel.SetTracerProvider(t.TracerProvider)
	if t.LoggerProvider != nil {
		global.SetLoggerProvider(t.LoggerProvider)
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	slog.SetDefault(t.Logger)
}

// Handler serves the Prometheus exposition of the registry.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.Registry, promhttp.HandlerOpts{})
}

// Shutdown flushes and stops every exporter.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for i := len(t.shutdown) - 1; i >= 0; i-- {
		errs = append(errs, t.shutdown[i](ctx))
	}
	t.shutdown = nil
	return errors.Join(errs...)
}

// Sampler is a parent-based ratio sampler that never drops a span
// outright: what the ratio would drop is recorded but not sampled, so
// ErrorKeeping can still export it when it ends in error. A span started
// with the attribute backstop.trace=true (a task enqueued or a run started
// with trace forced: `--trace`) is always sampled, and so are its
// children through its sampled context.
func Sampler(ratio float64) sdktrace.Sampler {
	return recordAll{sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))}
}

type recordAll struct{ sdktrace.Sampler }

// ForceAttribute forces sampling of the span that carries it.
const ForceAttribute = traceids.ForceAttribute

func (s recordAll) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	for _, kv := range p.Attributes {
		if string(kv.Key) == ForceAttribute && kv.Value.AsBool() {
			return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample,
				Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
		}
	}
	r := s.Sampler.ShouldSample(p)
	if r.Decision == sdktrace.Drop {
		r.Decision = sdktrace.RecordOnly
	}
	return r
}

func (s recordAll) Description() string { return "RecordAll{" + s.Sampler.Description() + "}" }

// ErrorKeeping passes sampled spans to next, and unsampled ones only when
// their status is Error (presented as sampled, since exporters drop what
// is not).
func ErrorKeeping(next sdktrace.SpanProcessor) sdktrace.SpanProcessor { return errorKeeping{next} }

type errorKeeping struct{ sdktrace.SpanProcessor }

func (p errorKeeping) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	if s.SpanContext().IsSampled() {
		p.SpanProcessor.OnStart(ctx, s)
	}
}

func (p errorKeeping) OnEnd(s sdktrace.ReadOnlySpan) {
	switch {
	case s.SpanContext().IsSampled():
		p.SpanProcessor.OnEnd(s)
	case s.Status().Code == codes.Error:
		p.SpanProcessor.OnEnd(sampledView{s})
	}
}

type sampledView struct{ sdktrace.ReadOnlySpan }

func (v sampledView) SpanContext() trace.SpanContext {
	sc := v.ReadOnlySpan.SpanContext()
	return sc.WithTraceFlags(sc.TraceFlags().WithSampled(true))
}

// minLevel drops the records under its level (the JSON handler has its
// own; the OpenTelemetry bridge has none).
type minLevel struct {
	slog.Handler
	level slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.level && m.Handler.Enabled(ctx, l)
}

func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(as), m.level}
}

func (m minLevel) WithGroup(name string) slog.Handler {
	return minLevel{m.Handler.WithGroup(name), m.level}
}
