package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/console"
)

// demoServe is `backstop demo --serve`: the product tour. The server runs
// in dev mode on loopback over the demo database while producers enqueue
// continuously, the demo's handlers (flaky, permanently failing, slow) work
// in-process, and a replayer replays each dead letter once, so retries,
// dead letters and replays happen live. It runs until Ctrl-C.
func (a *app) demoServe(ctx context.Context, addr string) error {
	loopback, err := isLoopback(addr)
	if err != nil {
		return err
	}
	if !loopback {
		return usageErr("demo --serve runs in dev mode (anonymous admin), so it only listens on a loopback address, not %s", addr)
	}
	log := slog.New(slog.NewJSONHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := &backstop.Config{
		Logger: log,
		Queues: map[string]backstop.QueueConfig{demoQueue: {MaxAttempts: 4, Retry: demoRetry, Concurrency: 20}},
		Kinds:  map[string]backstop.KindConfig{"sync_crm": {Timeout: 150 * time.Millisecond}},
	}
	// Metrics as serve records them, at /metrics beside the API.
	tel, stopTelemetry, err := a.startTelemetry(ctx, nil, "backstop-demo")
	if err != nil {
		return err
	}
	defer stopTelemetry()
	cfg.MeterProvider, cfg.TracerProvider = tel.MeterProvider, tel.TracerProvider
	s, c, err := a.open(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	defer startGauges(ctx, tel, c, nil, log)()
	srv, err := api.New(api.Options{Client: c, Logger: log, AnonymousAdmin: true, Metrics: tel.Handler(), LoopbackOnly: true})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := srv.HTTPServer(addr)
	hs.Handler = console.Handler(srv) // the web console at /, the API beside it
	hs.RegisterOnShutdown(srv.Close)

	w, err := backstop.NewWorker(c, &backstop.WorkerConfig{ID: "demo-worker", Queues: map[string]int{demoQueue: 20},
		PollInterval: 100 * time.Millisecond, MaintenanceInterval: 100 * time.Millisecond, TimeoutGrace: time.Second})
	if err != nil {
		return err
	}
	demoHandlers(w)
	if err := w.Start(ctx); err != nil {
		return err
	}
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	runID := fmt.Sprintf("live%06x", rand.Uint32()&0xffffff)
	wg.Go(func() { demoProduce(bg, c, runID, log) })
	wg.Go(func() { demoReplay(bg, c, log, demoReplayEvery) })

	base := "http://" + ln.Addr().String()
	fmt.Fprintf(a.stdout, `backstop demo: console %s/ (open it in a browser) · serving %s on %s (dev mode: no token needed, loopback only)

  Console       %s/
  API base      %s/v1
  OpenAPI       %s/v1/openapi.json
  Health        %s/healthz
  Metrics       %s/metrics

Producers enqueue tasks into queue %q every few hundred milliseconds; some fail
transiently and are retried, some fail for good and dead-letter, some are slow,
and every 5 s a dead letter is replayed — each one once: one that fails again
stays in the DLQ for you to replay, patch or discard. Try:

  curl -s '%s/v1/tasks?limit=5'
  curl -s %s/v1/queues
  curl -s -X POST %s/v1/tasks -H 'Content-Type: application/json' -d '{"queue":"demo","kind":"send_email","payload":{"n":1,"to":"you@example.com"}}'
  curl -s %s/metrics
  %s --db %s tasks list --state dead
  %s --db %s dlq list

Ctrl-C stops.
`, base, base, a.dbURL, base, base, base, base, base, demoQueue, base, base, base, base,
		selfCommand(), shellQuote(a.dbURL), selfCommand(), shellQuote(a.dbURL))

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
	}
	stopBG()
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shutErr := hs.Shutdown(sctx)
	if stopErr := w.Stop(sctx); stopErr != nil && shutErr == nil {
		shutErr = stopErr
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	fmt.Fprintln(a.stdout, "backstop demo: stopped")
	return shutErr
}

// demoProduce enqueues a few demo tasks every 300ms until ctx ends.
func demoProduce(ctx context.Context, c *backstop.Client, runID string, log *slog.Logger) {
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; {
		params := make([]backstop.EnqueueParams, 3)
		for j := range params {
			params[j] = demoWorkload(i, runID)
			i++
		}
		if _, err := c.EnqueueMany(ctx, params); err != nil && ctx.Err() == nil {
			log.Warn("demo producer", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// demoReplayEvery is how often the demo's replayer looks for a dead
// letter to replay.
const demoReplayEvery = 5 * time.Second

// demoReplay replays, every few seconds, the next open dead letter that was
// never replayed, in id order. Each dead letter is replayed at most once: one
// that fails for good dies again and stays in the DLQ, instead of being
// replayed (and its history growing) for as long as the demo runs.
func demoReplay(ctx context.Context, c *backstop.Client, log *slog.Logger, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	after := "" // dead letters up to this id were replayed or passed over
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		id, err := demoNextReplay(ctx, c, after)
		if err != nil || id == "" {
			continue
		}
		after = id
		if err := demoReplayOne(ctx, c, id); err != nil && ctx.Err() == nil {
			log.Warn("demo replay", "task_id", id, "error", err)
		}
	}
}

// demoNextReplay is the first open dead letter of the demo queue after
// after that was never replayed ("" none).
func demoNextReplay(ctx context.Context, c *backstop.Client, after string) (string, error) {
	for {
		page, err := c.List(ctx, backstop.ListParams{Queue: demoQueue, States: []bt.State{bt.StateDead},
			DLQStatuses: []bt.DLQStatus{bt.DLQOpen}, AfterID: after, Limit: 100})
		if err != nil || len(page) == 0 {
			return "", err
		}
		for _, t := range page {
			if t.ReplayCount == 0 {
				return t.ID, nil
			}
		}
		after = page[len(page)-1].ID
	}
}

func demoReplayOne(ctx context.Context, c *backstop.Client, id string) error {
	_, err := c.Replay(ctx, backstop.ReplayParams{ID: id, Actor: "demo-replayer"})
	return err
}
