package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/telemetry"
	"github.com/backstophq/backstop/store"
)

// startTelemetry sets up metrics, traces and logs for a long-running
// command (serve, work) from the configuration's telemetry section (nil:
// defaults) and the OTEL_* environment, and installs them as the otel and
// slog defaults. stop flushes the exporters.
func (a *app) startTelemetry(ctx context.Context, cfg *config.Config, service string) (*telemetry.Telemetry, func(), error) {
	o := telemetry.Options{Service: service, LogOutput: a.stderr, LogLevel: a.level(cfg)}
	if cfg != nil {
		o.OTLPEndpoint = cfg.Telemetry.OTLPEndpoint
		o.SampleRatio = cfg.Telemetry.SampleRatio
		o.MetricsDisabled = cfg.Telemetry.Metrics != nil && !*cfg.Telemetry.Metrics
	}
	t, err := telemetry.Setup(ctx, o)
	if err != nil {
		return nil, nil, usageErr("telemetry: %v", err)
	}
	// The process's globals (otel providers, the slog default) are the
	// command's only when it owns the process: tests run many commands in
	// one process at once, each writing to its own buffers, and a global
	// logger pointing at one test's buffer is written by the others.
	if f, ok := a.stderr.(*os.File); ok && f == os.Stderr {
		t.Install()
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			t.Logger.Warn("flushing telemetry", "error", err)
		}
	}
	return t, stop, nil
}

// startWorkTelemetry is startTelemetry for `backstop work` (on the
// database or on a server), plus its /metrics on metricsAddr when set;
// stop ends both.
func (a *app) startWorkTelemetry(ctx context.Context, cfg *config.Config, metricsAddr string) (*telemetry.Telemetry, func(), error) {
	tel, stopTelemetry, err := a.startTelemetry(ctx, cfg, "backstop-work")
	if err != nil {
		return nil, nil, err
	}
	if metricsAddr == "" {
		return tel, stopTelemetry, nil
	}
	stopMetrics, err := serveMetrics(ctx, metricsAddr, tel, tel.Logger)
	if err != nil {
		stopTelemetry()
		return nil, nil, err
	}
	return tel, func() { stopMetrics(); stopTelemetry() }, nil
}

// traced is cfg (nil: a new one) with the tracer provider the OTEL_*
// environment asks for, for a command that starts work on the database
// (`workflows run`, `enqueue`): its spans start the trace the workers
// continue (the steps' and tasks' traceparents). stop flushes it.
func (a *app) traced(ctx context.Context, cfg *backstop.Config) (*backstop.Config, func(), error) {
	if cfg == nil {
		cfg = &backstop.Config{}
	}
	t, err := telemetry.Setup(ctx, telemetry.Options{Service: "backstop", LogOutput: io.Discard, MetricsDisabled: true})
	if err != nil {
		return nil, nil, usageErr("telemetry: %v", err)
	}
	cfg.TracerProvider = t.TracerProvider
	if t.LoggerProvider != nil {
		cfg.LoggerProvider = t.LoggerProvider
	}
	return cfg, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = t.Shutdown(sctx)
	}, nil
}

// withTelemetry points the library's configuration at t's providers.
func withTelemetry(lib *backstop.Config, t *telemetry.Telemetry) {
	lib.Logger = t.Logger
	if t.MeterProvider != nil {
		lib.MeterProvider = t.MeterProvider
	}
	lib.TracerProvider = t.TracerProvider
	if t.LoggerProvider != nil {
		lib.LoggerProvider = t.LoggerProvider
	}
}

// serveMetrics serves t's /metrics on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string, t *telemetry.Telemetry, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageErr("--metrics-addr: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", t.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint", "error", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}, nil
}

// startGauges refreshes the store-derived gauges in the background when
// metrics are on and the store can read them; stop ends it. The worker
// registry's counts (workers by state) and the heartbeats of the workers
// that should be heartbeating join the store's one query.
// cfg (nil: none) adds the dead-letter retention policy's gauges.
func startGauges(ctx context.Context, t *telemetry.Telemetry, c *backstop.Client, cfg *config.Config, log *slog.Logger) func() {
	gr, ok := c.Store().(store.GaugeReader)
	if t.MeterProvider == nil || !ok {
		return func() {}
	}
	gr = telemetry.WithWorkerHeartbeats(telemetry.WithWorkers(gr, c.WorkerCounts), c.HeartbeatingWorkers)
	gr = telemetry.WithSchedules(gr, c.Store().ListSchedules)
	gr = telemetry.WithLimitWaiting(gr, limitWaiting(c))
	gr = telemetry.WithRelayCheckpoints(gr, func(ctx context.Context) ([]store.RelayCheckpointGauge, error) {
		return relay.CheckpointGauges(ctx, c)
	})
	if cfg != nil {
		gr = telemetry.WithDLQPolicy(gr, cfg.DLQGaugePolicy())
	}
	g, err := telemetry.StartStoreGauges(ctx, t.MeterProvider, gr, 0, nil, log)
	if err != nil {
		log.Warn("store gauges", "error", err)
		return func() {}
	}
	return g.Stop
}

// limitWaiting reads, per limit, the pending tasks its full budgets hold
// back, as the library's limit statuses say at the client's clock (a rate
// budget's tokens are the clock's, not the wall's).
func limitWaiting(c *backstop.Client) func(context.Context) (map[string]int, error) {
	return func(ctx context.Context) (map[string]int, error) {
		ls, err := c.Limits(ctx)
		if err != nil {
			return nil, err
		}
		out := make(map[string]int, len(ls))
		for _, l := range ls {
			out[l.Name] = l.Waiting
		}
		return out, nil
	}
}

// openWorkProcess starts a long-running process's telemetry (startWorkTelemetry)
// and opens the store with cfg's library configuration, instrumented by it;
// closeAll closes the store, then stops the telemetry.
func (a *app) openWorkProcess(ctx context.Context, cfg *config.Config, metricsAddr string) (
	*telemetry.Telemetry, *backstop.Client, func(), error) {
	tel, stopTelemetry, err := a.startWorkTelemetry(ctx, cfg, metricsAddr)
	if err != nil {
		return nil, nil, nil, err
	}
	lib := cfg.Library()
	withTelemetry(lib, tel)
	s, c, err := a.open(ctx, lib)
	if err != nil {
		stopTelemetry()
		return nil, nil, nil, err
	}
	return tel, c, func() { s.Close(); stopTelemetry() }, nil
}
