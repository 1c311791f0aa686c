package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/console"
	"github.com/backstophq/backstop/internal/execworker"
	"github.com/backstophq/backstop/store"
)

func init() { register(serveCmd) }

type serveFlags struct {
	addr        string
	dev         bool
	maintenance time.Duration
	rateLimit   float64
	maxBody     int64
	listBytes   int
	grace       time.Duration
	config      string
}

func serveCmd(a *app) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API (and run maintenance)",
		Long: `Serve the HTTP API under /v1 (docs/api.md; the OpenAPI document is at /v1/openapi.json),
/healthz and /readyz, and stand in the maintenance election with every worker on the store: the
leader settles expired leases, promotes scheduled tasks, expires deadlines and runs retention.

Every API call needs a bearer token (backstop tokens create). On a non-loopback address the
server refuses to start while no token exists. --dev, allowed on loopback only, lets requests
without a token in as admin. SIGINT/SIGTERM shut down gracefully.

In every mode, writes must send Content-Type: application/json (a write without a body may
omit it) and are refused when their Origin is another site's; on a loopback address only
loopback host names (localhost, 127.0.0.1, [::1]) and the configured allowed_hosts are
answered (docs/api.md, "Browsers, hosts and origins").

--config FILE reads a YAML configuration (queues, kinds, limits, retention, in-process exec
workers...); BACKSTOP_* variables override it and flags override both (docs/configuration.md).
Exec workers declared under workers: run inside the server and stop with it, and so do the
relay of the relay: section (the sinks of relay.sinks, the event streams of relay.streams)
and the ingesters of the ingest: list, as backstop relay and backstop ingest would run
them (docs/brokers.md, "Running it").`,
		Example: `  backstop tokens create --name ci --role operator
  backstop serve --addr 0.0.0.0:8080
  backstop serve --dev`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.serveConfig(cmd, &f)
			if err != nil {
				return err
			}
			return a.serve(cmd.Context(), &f, cfg)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address")
	fl.BoolVar(&f.dev, "dev", false, "allow anonymous requests as admin (loopback addresses only)")
	fl.DurationVar(&f.maintenance, "maintenance-interval", time.Second, "how often the maintenance leader runs each maintenance service (0: this server takes no part in the election)")
	fl.Float64Var(&f.rateLimit, "rate-limit", 1000, "requests per second per token (negative disables)")
	fl.Int64Var(&f.maxBody, "max-body", 10<<20, "largest request body in bytes")
	fl.IntVar(&f.listBytes, "list-max-bytes", api.DefaultListMaxBytes,
		"byte budget of a task list response: a page ends before the item that would pass it (at least one item), with next_cursor")
	fl.DurationVar(&f.grace, "shutdown-grace", 30*time.Second, "how long in-flight requests may take on shutdown")
	fl.StringVar(&f.config, "config", "", "configuration file (YAML, docs/configuration.md); flags > BACKSTOP_* env > file > defaults")
	return cmd
}

// isLoopback reports whether a listen address only accepts local
// connections. An empty host (":8080") listens everywhere.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, usageErr("--addr %q: want host:port", addr)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

func liveTokens(ctx context.Context, s store.Store) (int, error) {
	ts, err := s.(store.Tokens).ListTokens(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range ts {
		if t.RevokedAt == nil {
			n++
		}
	}
	return n, nil
}

// serveConfig loads --config and the environment and applies them to the
// flags the user did not set: flags > env > file > defaults.
func (a *app) serveConfig(cmd *cobra.Command, f *serveFlags) (*config.Config, error) {
	cfg, err := a.loadConfig(f.config)
	if err != nil {
		return nil, err
	}
	fl := cmd.Flags()
	if !fl.Changed("db") && cfg.DB != "" {
		a.dbURL = cfg.DB
	}
	if !fl.Changed("addr") && cfg.Addr != "" {
		f.addr = cfg.Addr
	}
	if !fl.Changed("dev") && cfg.Dev {
		f.dev = true
	}
	if !fl.Changed("maintenance-interval") && cfg.MaintenanceInterval != 0 {
		f.maintenance = cfg.MaintenanceInterval.D()
	}
	return cfg, nil
}

func (a *app) serve(ctx context.Context, f *serveFlags, cfg *config.Config) error {
	loopback, err := isLoopback(f.addr)
	if err != nil {
		return err
	}
	if f.dev && !loopback {
		return usageErr("--dev lets anyone in as admin, so it only works on a loopback address (127.0.0.1, ::1, localhost), not %s", f.addr)
	}
	if f.listBytes < 1 {
		return usageErr("--list-max-bytes %d: must be positive", f.listBytes)
	}
	tel, stopTelemetry, err := a.startTelemetry(ctx, cfg, "backstop-serve")
	if err != nil {
		return err
	}
	defer stopTelemetry()
	log := tel.Logger
	lib := cfg.Library()
	withTelemetry(lib, tel)
	s, c, err := a.open(ctx, lib)
	if err != nil {
		return err
	}
	defer s.Close()
	defer startGauges(ctx, tel, c, cfg, log)()
	if err := putConfigSchedules(ctx, c, cfg, log); err != nil {
		return err
	}
	if err := applyLimits(ctx, c, cfg.ConcurrencyLimits(), log); err != nil { // limits.go
		return err
	}
	if err := applyFair(ctx, c, cfg.FairQueues(), log); err != nil { // queues_fair.go
		return err
	}
	n, err := liveTokens(ctx, s)
	if err != nil {
		return err
	}
	switch {
	case n == 0 && !loopback:
		return usageErr("refusing to serve on %s: it is not a loopback address and no API token exists; "+
			"create one first with `backstop tokens create --name NAME --role admin`", f.addr)
	case n == 0 && !f.dev:
		log.Warn("no API tokens exist: every request will get 401; create one with `backstop tokens create` or use --dev")
	}
	srv, err := api.New(api.Options{Client: c, Logger: log, AnonymousAdmin: f.dev, RateLimit: f.rateLimit, MaxBodyBytes: f.maxBody,
		ListMaxBytes: f.listBytes, Metrics: tel.Handler(), LoopbackOnly: loopback, AllowedHosts: cfg.AllowedHosts})
	if err != nil {
		return err
	}
	defer srv.Close()
	hs := srv.HTTPServer(f.addr)
	hs.Handler = console.Handler(srv) // the web console at /, the API beside it
	hs.RegisterOnShutdown(srv.Close)
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "backstop: serving http://%s (console /, API /v1, OpenAPI /v1/openapi.json, /healthz, /readyz)\n", ln.Addr())
	if f.dev {
		log.Warn("--dev: requests without a token are admin")
	}

	// serve stands in the maintenance and retention elections with every
	// worker on this store (maintainer.go): one process maintains at a time.
	// Its id is its host and address, so that a server restarted on the
	// same address (after a crash) renews its own lease at once.
	if f.maintenance > 0 {
		host, _ := os.Hostname()
		m, err := c.NewMaintainer(&backstop.MaintainerConfig{ID: "serve-" + cmp.Or(host, "host") + "-" + ln.Addr().String(),
			Interval: f.maintenance, LeaderTTL: cfg.LeaderTTL.D()})
		if err != nil {
			return err
		}
		if err := m.Start(ctx); err != nil {
			return err
		}
		log.Info("maintenance: standing for the leadership", "leader_id", m.ID(), "interval", f.maintenance.String())
		defer m.Stop()
	}

	workers, handlers, err := startConfigWorkers(ctx, c, cfg, log)
	defer func() {
		// Drain the in-process workers within the shutdown grace.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.grace)
		defer cancel()
		for _, w := range workers {
			if err := w.Stop(wctx); err != nil {
				log.Error("stopping an in-process worker", "worker_id", w.ID(), "error", err)
			}
		}
		for _, h := range handlers {
			h.Close() //nolint:errcheck // best effort: a directory of leftover result files
		}
	}()
	if err != nil {
		return err
	}

	// The relay: section's relay and the ingest: list's ingesters run
	// here like their own processes would (relayrun.go); serve's
	// maintainer stands for this process.
	if sp := relaySpecOf(cfg); len(sp.names) > 0 {
		sp.maintenance = -1
		run, err := startRelay(ctx, c, cfg, sp, log)
		if err != nil {
			return err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.grace)
			defer cancel()
			if err := run.stop(rctx); err != nil {
				log.Error("stopping the in-process relay", "error", err)
			}
		}()
	}
	ins, err := startIngesters(ctx, c, cfg, log, backstop.WorkerConfig{MaintenanceInterval: -1, LeaderTTL: cfg.LeaderTTL.D()})
	if err != nil {
		return err
	}
	defer func() {
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.grace)
		defer cancel()
		if err := ins.stop(ictx); err != nil {
			log.Error("stopping the in-process ingesters", "error", err)
		}
	}()

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), f.grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// startConfigWorkers starts the exec workers the configuration declares.
// They take no part in the maintenance election: serve's maintainer
// stands for this process.
func startConfigWorkers(ctx context.Context, c *backstop.Client, cfg *config.Config, log *slog.Logger) ([]*backstop.Worker, []*execworker.Handler, error) {
	var started []*backstop.Worker
	var handlers []*execworker.Handler
	for i, wc := range cfg.Workers.Run {
		h, err := execworker.New(execworker.Config{Command: wc.Command, PermanentExitCodes: wc.PermanentExitCodes})
		if err != nil {
			return started, handlers, usageErr("workers[%d]: %v", i, err)
		}
		handlers = append(handlers, h)
		lease := wc.Lease.D()
		if lease == 0 {
			lease = cfg.QueueLease(wc.Queue)
		}
		w, err := backstop.NewWorker(c, &backstop.WorkerConfig{
			ID:     fmt.Sprintf("serve-%s-%d", wc.Queue, i),
			Queues: map[string]int{wc.Queue: wc.Concurrency}, Kinds: wc.Kinds, Lease: lease,
			MaintenanceInterval: -1, Version: readBuildVersion().short(), Labels: runnerLabels(runnerServe),
		})
		if err != nil {
			return started, handlers, usageErr("workers[%d]: %v", i, err)
		}
		if len(wc.Kinds) == 0 {
			w.HandleDefault(h)
		}
		for _, k := range wc.Kinds {
			w.Handle(k, h)
		}
		if err := w.Start(ctx); err != nil {
			return started, handlers, err
		}
		started = append(started, w)
		log.Info("in-process exec worker started", "worker_id", w.ID(), "queue", wc.Queue, "kinds", wc.Kinds,
			"concurrency", wc.Concurrency, "command", wc.Command)
	}
	return started, handlers, nil
}
