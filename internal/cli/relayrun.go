package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/relay"
)

// relaySpec is what one relay delivers and follows: backstop relay's flags,
// or the configuration's relay: section inside serve.
type relaySpec struct {
	names       []string // sinks of cfg.Sinks, sorted
	concurrency int
	lease       time.Duration
	id          string
	// maintenance: the relay worker's maintenance interval (-1: none,
	// when the process has a maintainer of its own).
	maintenance time.Duration
	streams     []string // none: no event-log relay
	streamsSink string
	checkpoint  string
	topic       string
	from        string // a new checkpoint's start: relay.FromStart or FromEnd
}

// relaySpecOf is the configuration's relay: section as a spec (already
// validated by config.Validate), with its defaults; no sinks: no relay.
func relaySpecOf(cfg *config.Config) relaySpec {
	r := cfg.Relay
	sp := relaySpec{names: cfg.RelaySinks(), concurrency: cmp.Or(r.Concurrency, 16), lease: cmp.Or(r.Lease.D(), 30*time.Second),
		streams: r.Streams, streamsSink: r.StreamsSink, topic: cmp.Or(r.StreamsTopic, relay.DefaultEventTopic), from: r.From}
	if len(sp.streams) > 0 {
		if sp.streamsSink == "" && len(sp.names) == 1 {
			sp.streamsSink = sp.names[0]
		}
		sp.checkpoint = cmp.Or(r.Checkpoint, sp.streamsSink)
	}
	return sp
}

// relayRun is a started relay: the message relay of its sinks and, with
// streams, the event-log relay of its checkpoint.
type relayRun struct {
	r     *relay.Relay
	er    *relay.EventRelay
	sinks map[string]relay.Sink
}

// startRelay opens the spec's sinks and starts delivering; stop ends it.
func startRelay(ctx context.Context, c *backstop.Client, cfg *config.Config, sp relaySpec, log *slog.Logger) (*relayRun, error) {
	run := &relayRun{sinks: map[string]relay.Sink{}}
	fail := func(err error) (*relayRun, error) {
		run.closeSinks()
		return nil, err
	}
	for _, name := range sp.names {
		sk, err := relay.Open(ctx, name, cfg.Sinks[name].URL, cfg.Sinks[name].RelayOptions())
		if err != nil {
			return fail(fmt.Errorf("relay: sink %s: %w", name, err))
		}
		run.sinks[name] = sk
	}
	var err error
	run.r, err = relay.New(c, relay.Config{Sinks: run.sinks, Concurrency: sp.concurrency, Logger: log, MeterProvider: c.Config().MeterProvider,
		Worker: backstop.WorkerConfig{ID: sp.id, Lease: sp.lease, LeaderTTL: cfg.LeaderTTL.D(), MaintenanceInterval: sp.maintenance}})
	if err != nil {
		return fail(usageErr("relay: %v", err))
	}
	if len(sp.streams) > 0 {
		run.er, err = relay.NewEvents(c, relay.EventsConfig{Sink: run.sinks[sp.streamsSink], SinkName: sp.streamsSink, Checkpoint: sp.checkpoint,
			Streams: sp.streams, Topic: sp.topic, From: sp.from, Logger: log, MeterProvider: c.Config().MeterProvider,
			LeaderTTL: cmp.Or(cfg.LeaderTTL.D(), config.DefaultLeaderTTL), ID: run.r.ID()})
		if err != nil {
			return fail(usageErr("relay: %v", err))
		}
	}
	if err := run.r.Start(ctx); err != nil {
		return fail(err)
	}
	if run.er != nil {
		if err := run.er.Start(ctx); err != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = run.r.Stop(sctx)
			return fail(fmt.Errorf("relay: events: %w", err))
		}
	}
	log.Info("relay started", "worker_id", run.r.ID(), "sinks", sp.names, "streams", sp.streams, "checkpoint", sp.checkpoint)
	return run, nil
}

// stop stops following events and delivering (deliveries in flight may
// finish until ctx ends), then closes the sinks.
func (run *relayRun) stop(ctx context.Context) error {
	defer run.closeSinks()
	if run.er != nil {
		_ = run.er.Stop(ctx)
	}
	if err := run.r.Stop(ctx); err != nil {
		return fmt.Errorf("relay: stop: %w", err)
	}
	return nil
}

func (run *relayRun) closeSinks() {
	for _, sk := range run.sinks {
		sk.Close()
	}
}

// candidateID names a process in an election: host-pid-random.
func candidateID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", cmp.Or(host, "host"), os.Getpid(), hex.EncodeToString(b))
}

// ingestRun is one running ingester of a process.
type ingestRun struct {
	in     *ingest.Ingester
	cancel context.CancelFunc
	done   chan error
}

// ingesters are the ingesters a process runs (serve's ingest: list), each
// in its own goroutine, with the refused messages' worker they share.
type ingesters struct {
	runs    []*ingestRun
	refused *backstop.Worker
	mu      sync.Mutex
}

// ingestPrepared is one checked ingester, ready to start.
type ingestPrepared struct {
	src   ingest.Source
	m     ingest.Mapping
	elect bool
}

// checkIngest checks that the queue takes the tasks as mapped (e.g. a
// queue declared without ordering refuses an ordering key): said at start,
// not by refusing every message.
func checkIngest(c *backstop.Client, m ingest.Mapping) error {
	probe := backstop.EnqueueParams{Queue: m.Queue, Kind: m.Kind, MaxAttempts: m.MaxAttempts}
	if m.OrderingKeyField != nil {
		probe.OrderingKey, probe.Sequence = "probe", 1
	}
	return c.Validate(probe)
}

// startIngesters starts the configuration's ingesters on c; every entry
// is checked before any starts.
func startIngesters(ctx context.Context, c *backstop.Client, cfg *config.Config, log *slog.Logger, wc backstop.WorkerConfig) (*ingesters, error) {
	var ps []ingestPrepared
	for i, e := range cfg.Ingest {
		spec := e.Spec()
		m, err := spec.Mapping(func(key string) string { return fmt.Sprintf("ingest[%d].%s", i, key) })
		if err != nil {
			return nil, usageErr("%v", err)
		}
		if err := checkIngest(c, m); err != nil {
			return nil, usageErr("ingest[%d]: %v", i, err)
		}
		ps = append(ps, ingestPrepared{src: spec.Source, m: m, elect: e.Elected()})
	}
	all := &ingesters{}
	if len(ps) == 0 {
		return all, nil
	}
	w, err := ingest.RefusedWorker(c, wc)
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	all.refused = w
	ttl := cmp.Or(cfg.LeaderTTL.D(), config.DefaultLeaderTTL)
	for _, p := range ps {
		id := candidateID()
		in, err := ingest.New(ingest.Config{Enqueuer: c, Mapping: p.m, Logger: log, MeterProvider: c.Config().MeterProvider,
			Positions: c.Store(), ID: id})
		if err != nil {
			_ = all.stop(context.WithoutCancel(ctx))
			return nil, usageErr("ingest: %v", err)
		}
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r := &ingestRun{in: in, cancel: cancel, done: make(chan error, 1)}
		go func() {
			var err error
			if p.elect {
				err = ingest.RunElected(rctx, p.src, in, ingest.Election{Store: c.Store(), ID: id, TTL: ttl, Now: c.Engine().Now}, log)
			} else {
				err = ingest.Run(rctx, p.src, in, log)
			}
			if err != nil {
				log.Error("ingest stopped", "from", p.src.URL, "topic", p.src.Topic+p.src.Subject, "queue", p.m.Queue, "error", err)
			}
			r.done <- err
		}()
		all.runs = append(all.runs, r)
		log.Info("ingester started", "topic", p.src.Topic+p.src.Subject, "queue", p.m.Queue, "kind", p.m.Kind, "elected", p.elect)
	}
	return all, nil
}

// stop ends every ingester (a batch whose enqueue had not committed is
// read again by the next) and the refused messages' worker.
func (all *ingesters) stop(ctx context.Context) error {
	all.mu.Lock()
	defer all.mu.Unlock()
	var errs []error
	for _, r := range all.runs {
		r.cancel()
		<-r.done
		r.in.Close()
	}
	all.runs = nil
	if all.refused != nil {
		errs = append(errs, all.refused.Stop(ctx))
		all.refused = nil
	}
	return errors.Join(errs...)
}
