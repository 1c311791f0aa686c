package cli

import (
	"cmp"
	"context"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/relay"
)

func init() { register(relayCmd) }

type relayOptions struct {
	sinks       []string
	config      string
	concurrency int
	lease       time.Duration
	grace       time.Duration
	id          string
	metricsAddr string
	streams     string
	streamsSink string
	checkpoint  string
	topic       string
	from        string
}

func relayCmd(a *app) *cobra.Command {
	var o relayOptions
	cmd := &cobra.Command{
		Use:   "relay --sink NAME=URL...",
		Short: "Deliver outbox messages to NATS JetStream, Kafka and webhooks",
		Long: `relay delivers the messages of its sinks (written by PublishTx, backstop publish or
POST /v1/messages) and settles each through the engine: delivered, retried by the sink's
policy, or dead-lettered with the broker's error (docs/brokers.md).

--sink NAME=URL (repeatable) names a sink: nats://HOST:PORT (JetStream: topic = subject,
Nats-Msg-Id = message id; a stream BACKSTOP_<NAME> is created for a subject no stream
covers), kafka://HOST:PORT (topic = Kafka topic, key = record key, idempotent producer),
http(s)://... (a webhook: POST, Backstop-Signature when the sink has a secret). Without
--sink, the configuration's relay.sinks, else every sink of its sinks: section; a --sink of
a configured name keeps that entry's timeout, secret, stream and retry policy. The
configuration's relay: section (docs/configuration.md) gives the defaults of --concurrency,
--lease and the --streams flags; serve runs that relay in-process.

Several relays may deliver one sink at once: each message is claimed under a lease and a
key's messages are admitted one at a time in commit order, so they share the messages
without delivering one twice or out of order (docs/brokers.md, "Running it").

Messages with one key are delivered one at a time in commit order. On SIGTERM or SIGINT
the relay stops claiming and lets deliveries in flight finish within --grace.

--streams all,queue.Q,type.T,run.R... also publishes those event streams to one sink
(--streams-sink; default: the only sink given) from the durable checkpoint --checkpoint
(default: the sink's name): each event's envelope, masked as in a task's history, on topic
backstop.events.<type> (--streams-topic), with the event id as the broker's message id.
The checkpoint moves only after the sink acknowledged; after a crash the relay publishes
again from it and the broker removes the repeats (JetStream). On NATS and Kafka a read's
events (up to 500) are published at once and their acknowledgements awaited together; the
checkpoint moves once per read, never past an event that was not acknowledged. A checkpoint's
first run starts at the beginning of the log (--from start, the default) or at its end (--from
end: only the events appended from then on); a checkpoint that exists resumes from its cursor
whatever --from says. See backstop relay status.`,
		Example: `  backstop relay --sink bus=nats://127.0.0.1:4222
  backstop relay --sink log=kafka://127.0.0.1:9092 --sink hook=https://example.test/in --config backstop.yaml
  backstop relay --sink bus=nats://127.0.0.1:4222 --streams queue.emails,type.task.dead_lettered
  backstop relay --sink bus=nats://127.0.0.1:4222 --streams all --from end`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.relay(cmd, &o) },
	}
	cmd.AddCommand(relayStatusCmd(a))
	f := cmd.Flags()
	f.StringArrayVar(&o.sinks, "sink", nil, "a sink to deliver, NAME=URL (repeatable; default: the configuration's sinks)")
	f.StringVar(&o.config, "config", "", "configuration file (YAML, docs/configuration.md): sinks, their retry policies, db")
	f.IntVar(&o.concurrency, "concurrency", 16, "messages in flight per sink (of distinct keys)")
	f.DurationVar(&o.lease, "lease", 30*time.Second, "lease of a claimed message, renewed by heartbeats every lease/3")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "on SIGTERM/SIGINT, how long deliveries in flight may finish")
	f.StringVar(&o.id, "id", "", "relay worker id (default: host-pid-random)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (default: off)")
	f.StringVar(&o.streams, "streams", "", "event streams to publish, comma-separated: all, queue.Q, type.T, run.R, task.ID, worker.ID, node.H, execution.ID, audit (default: none)")
	f.StringVar(&o.streamsSink, "streams-sink", "", "the sink that receives the events (default: the only sink)")
	f.StringVar(&o.checkpoint, "checkpoint", "", "the events' durable checkpoint name (default: the streams sink's name)")
	f.StringVar(&o.topic, "streams-topic", relay.DefaultEventTopic, "the events' topic ({type}: the event's type, as the last token)")
	f.StringVar(&o.from, "from", relay.FromStart, "where a new checkpoint starts: start (the log's beginning) or end (events from now on); an existing checkpoint is never moved")
	return cmd
}

func (a *app) relay(cmd *cobra.Command, o *relayOptions) error {
	ctx := cmd.Context()
	cfg, err := a.loadConfig(o.config)
	if err != nil {
		return err
	}
	if !cmd.Flags().Changed("db") && cfg.DB != "" {
		a.dbURL = cfg.DB
	}
	if o.concurrency < 1 || o.grace < 0 || o.lease < time.Second {
		return usageErr("relay: --concurrency must be positive, --grace not negative, --lease at least 1s")
	}
	if cfg.Sinks == nil {
		cfg.Sinks = map[string]config.Sink{}
	}
	named := map[string]bool{}
	for _, spec := range o.sinks {
		name, url, err := relay.ParseSpec(spec)
		if err != nil {
			return usageErr("relay: %v", err)
		}
		if named[name] {
			return usageErr("relay: --sink %s is given twice", name)
		}
		named[name] = true
		sk := cfg.Sinks[name]
		sk.URL = url
		cfg.Sinks[name] = sk
	}
	if err := cfg.Validate(); err != nil {
		return usageErr("relay: %v", err)
	}
	// The configuration's relay: section gives the defaults of the flags.
	sp := relaySpecOf(cfg)
	fl := cmd.Flags()
	switch {
	case len(o.sinks) > 0:
		sp.names = slices.Sorted(maps.Keys(named))
	case len(sp.names) == 0:
		sp.names = slices.Sorted(maps.Keys(cfg.Sinks))
	}
	names := sp.names
	if len(names) == 0 {
		return usageErr("relay: no sink: give --sink NAME=URL or a sinks: section in --config")
	}
	if fl.Changed("concurrency") || cfg.Relay.Concurrency == 0 {
		sp.concurrency = o.concurrency
	}
	if fl.Changed("lease") || cfg.Relay.Lease == 0 {
		sp.lease = o.lease
	}
	sp.id = o.id
	if fl.Changed("from") || sp.from == "" {
		sp.from = o.from
	}
	if sp.from != relay.FromStart && sp.from != relay.FromEnd {
		return usageErr("relay: --from %q: want start (the log's beginning) or end (events from now on)", sp.from)
	}
	if fl.Changed("streams") || o.streamsSink != "" || o.checkpoint != "" || fl.Changed("streams-topic") {
		sp.streams, sp.streamsSink, sp.checkpoint, sp.topic = nil, o.streamsSink, o.checkpoint, o.topic
		if sp.streams, err = relay.ParseStreams(o.streams); err != nil {
			return usageErr("relay: %v", err)
		}
	}
	if fl.Changed("from") && len(sp.streams) == 0 {
		return usageErr("relay: --from is where an event-log checkpoint starts: give --streams (or relay.streams in --config)")
	}
	if len(sp.streams) > 0 {
		if err := relay.CheckTopic(sp.topic); err != nil {
			return usageErr("relay: --streams-topic: %v", err)
		}
		switch {
		case sp.streamsSink == "" && len(names) > 1:
			return usageErr("relay: --streams: which sink receives the events? give --streams-sink (one of %s)", strings.Join(names, ", "))
		case sp.streamsSink == "":
			sp.streamsSink = names[0]
		case !slices.Contains(names, sp.streamsSink):
			return usageErr("relay: --streams-sink %s: not a sink of this relay (%s)", sp.streamsSink, strings.Join(names, ", "))
		}
		sp.checkpoint = cmp.Or(sp.checkpoint, sp.streamsSink)
		if len(sp.checkpoint) > 200 {
			return usageErr("relay: --checkpoint: at most 200 bytes")
		}
	}

	tel, c, closeAll, err := a.openWorkProcess(ctx, cfg, o.metricsAddr)
	if err != nil {
		return err
	}
	defer closeAll()
	log := tel.Logger
	defer startGauges(ctx, tel, c, cfg, log)()

	run, err := startRelay(ctx, c, cfg, sp, log)
	if err != nil {
		return err
	}
	r := run.r
	<-ctx.Done()

	log.Info("relay draining", "worker_id", r.ID(), "grace", o.grace.String())
	stopCtx, cancel := context.WithTimeout(context.Background(), o.grace)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-stopCtx.Done():
		}
	}()
	if err := run.stop(stopCtx); err != nil {
		return err
	}
	log.Info("relay stopped", "worker_id", r.ID())
	return nil
}
