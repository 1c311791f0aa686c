package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/store"
)

func init() { register(ingestCmd) }

type ingestOptions struct {
	spec                ingest.Spec
	elect               bool
	id                  string
	config, metricsAddr string
}

func ingestCmd(a *app) *cobra.Command {
	var o ingestOptions
	cmd := &cobra.Command{
		Use:   "ingest --from kafka://HOST:PORT --topic T | --from nats://HOST:PORT --subject S --queue Q --kind K",
		Short: "Turn Kafka or NATS JetStream messages into tasks",
		Long: `ingest reads a Kafka topic (a consumer group, --group) or a NATS JetStream subject (a
durable consumer named --group, on the stream that covers the subject) and enqueues each
message as a task of --queue and --kind, its value (JSON) as the payload. The offset is
committed, or the message acked, only after its batch's enqueue committed (docs/brokers.md,
"Ingest").

The task id is the --id-field of the value or the --id-header of the message; without
either, a UUID derived from the queue and the broker position (topic/partition/offset, or
stream/sequence). A redelivered message therefore finds its task instead of adding one.
--ordering-key-field and --sequence-field (both or neither) make it an ordered task
(docs/ordering.md): out-of-order messages are handled in sequence, gaps reported.

Fields are paths into the JSON value: keys separated by dots, array indexes in brackets, an
optional leading "$." (check.id, $.check.id, results[0].minute).

A message that cannot become a task (not JSON, no id, a bad ordering key or sequence, a task
the engine refuses) is logged with its position, counted, and recorded as a task of kind
backstop.ingest.refused on the queue ingest.refused, dead-lettered at once with its reason
(on --db; over --server it waits there), before it is acked.

With --db, ingesters of one topic (or subject) and group stand in an election (the lease
ingest.GROUP.TOPIC): one reads at a time, another takes over within leader_ttl when it dies,
at once when it stops (--elect=false: they share the group's partitions, or the durable's
messages). --exit-after-idle counts from when this ingester leads. serve runs the
ingesters of the configuration's ingest: list the same way (docs/configuration.md).

On SIGTERM or SIGINT ingest stops; a batch whose enqueue had not committed is read again by
the next ingester. Prints "ingested N, duplicate N, refused N" when it ends. Bad flags exit 2.`,
		Example: `  backstop ingest --from kafka://127.0.0.1:9092 --topic uptime.results --queue results --kind check \
      --id-field check.id --ordering-key-field check.subscription --sequence-field check.minute
  backstop ingest --from nats://127.0.0.1:4222 --subject orders.created --queue orders --kind created --id-header Nats-Msg-Id`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.ingest(cmd, &o) },
	}
	f := cmd.Flags()
	sp := &o.spec
	f.StringVar(&sp.URL, "from", "", "the broker: kafka://HOST:PORT[?brokers=H:P,...] or nats://HOST:PORT (required)")
	f.StringVar(&sp.Topic, "topic", "", "the Kafka topic (with kafka://)")
	f.StringVar(&sp.Subject, "subject", "", "the NATS subject (with nats://; a JetStream stream must cover it)")
	f.StringVar(&sp.Queue, "queue", "", "the queue of the tasks (required)")
	f.StringVar(&sp.Kind, "kind", "", "the kind of the tasks (required)")
	f.StringVar(&sp.IDField, "id-field", "", "the task id: this field of the value (a path, e.g. check.id)")
	f.StringVar(&sp.IDHeader, "id-header", "", "the task id: this header of the message")
	f.StringVar(&sp.OrderingKeyField, "ordering-key-field", "", "the ordering key: this field of the value")
	f.StringVar(&sp.SequenceField, "sequence-field", "", "the sequence: this field of the value (an integer, or a string holding one)")
	f.StringVar(&sp.Group, "group", "", "the Kafka consumer group or JetStream durable consumer (default backstop-ingest-QUEUE)")
	f.IntVar(&sp.Batch, "batch", 500, "most messages enqueued in one transaction (1-10000)")
	f.IntVar(&sp.MaxAttempts, "max-attempts", 0, "attempts of each task (default: the queue's, then 25)")
	f.DurationVar(&sp.IdleExit, "exit-after-idle", 0, "exit 0 once caught up and no message arrived for this long (0: never)")
	f.DurationVar(&sp.AckWait, "ack-wait", 30*time.Second, "NATS: a message not acked this long (its ingester died) is delivered again")
	f.BoolVar(&o.elect, "elect", true, "with --db, stand in the election of the topic and group: one ingester reads at a time, another takes over when it dies (false: share the group)")
	f.StringVar(&o.id, "id", "", "this ingester's name in the election (default: host-pid-random)")
	f.StringVar(&o.config, "config", "", "configuration file (YAML, docs/configuration.md): queues (their ordering), db, telemetry")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (default: off)")
	return cmd
}

// mapping checks the flags and makes the mapping; nothing is opened.
func (o *ingestOptions) mapping() (ingest.Mapping, error) {
	m, err := o.spec.Mapping(ingest.FlagName)
	if err != nil {
		return m, usageErr("ingest: %v", err)
	}
	return m, nil
}

// ingestSummary is what ingest prints when it ends.
type ingestSummary struct {
	Ingested  int `json:"ingested"`
	Duplicate int `json:"duplicate"`
	Refused   int `json:"refused"`
}

func (a *app) ingest(cmd *cobra.Command, o *ingestOptions) error {
	ctx := cmd.Context()
	m, err := o.mapping()
	if err != nil {
		return err
	}
	cfg, err := a.loadConfig(o.config)
	if err != nil {
		return err
	}
	if !cmd.Flags().Changed("db") && cfg.DB != "" {
		a.dbURL = cfg.DB
	}
	tel, stopTelemetry, err := a.startWorkTelemetry(ctx, cfg, o.metricsAddr)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	log := tel.Logger

	var (
		enq   ingest.Enqueuer
		elect *ingest.Election // nil: no election (over a server, or --elect=false)
		// positions receives the ingester's reports (with --db).
		positions store.IngestPositions
		id        string
	)
	if a.server != "" {
		b, err := a.backend(ctx, nil)
		if err != nil {
			return err
		}
		defer b.Close()
		enq = serverEnqueuer{b}
	} else {
		lib := cfg.Library()
		withTelemetry(lib, tel)
		s, c, err := a.open(ctx, lib)
		if err != nil {
			return err
		}
		defer s.Close()
		if err := checkIngest(c, m); err != nil {
			return usageErr("ingest: %v", err)
		}
		positions, id = c.Store(), cmp.Or(o.id, candidateID())
		if o.elect {
			elect = &ingest.Election{Store: c.Store(), ID: id,
				TTL: cmp.Or(cfg.LeaderTTL.D(), config.DefaultLeaderTTL), Now: c.Engine().Now}
		}
		enq = c
		w, err := ingest.RefusedWorker(c, backstop.WorkerConfig{LeaderTTL: cfg.LeaderTTL.D()})
		if err != nil {
			return err
		}
		if err := w.Start(ctx); err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = w.Stop(sctx)
		}()
	}
	in, err := ingest.New(ingest.Config{Enqueuer: enq, Mapping: m, Logger: log, MeterProvider: tel.MeterProvider, Positions: positions, ID: id})
	if err != nil {
		return usageErr("ingest: %v", err)
	}
	defer in.Close()
	if elect != nil {
		err = ingest.RunElected(ctx, o.spec.Source, in, *elect, log)
	} else {
		err = ingest.Run(ctx, o.spec.Source, in, log)
	}
	if err != nil {
		return err
	}
	t := in.Totals()
	log.Info("ingest stopped", "ingested", t.Ingested, "duplicate", t.Duplicate, "refused", t.Refused)
	sum := ingestSummary{Ingested: t.Ingested, Duplicate: t.Duplicate, Refused: t.Refused}
	return a.print(sum, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "ingested %d, duplicate %d, refused %d\n", sum.Ingested, sum.Duplicate, sum.Refused)
		return err
	})
}

// serverEnqueuer enqueues through a server, its refusals turned back into
// the library's errors (an existing id: ErrConflict; bad input:
// ErrInvalid), which the ingester tells apart.
type serverEnqueuer struct{ b backend }

func (s serverEnqueuer) EnqueueMany(ctx context.Context, ps []backstop.EnqueueParams) ([]backstop.EnqueueResult, error) {
	rs, err := s.b.EnqueueMany(cliActor(ctx), ps)
	return rs, libraryErr(err)
}

func libraryErr(err error) error {
	var be *backstop.BatchError
	if errors.As(err, &be) {
		return &backstop.BatchError{Index: be.Index, Err: libraryErr(be.Err)}
	}
	var ee *exitError
	if errors.As(err, &ee) {
		switch ee.code {
		case ExitConflict:
			return fmt.Errorf("%w: %v", backstop.ErrConflict, err)
		case ExitUsage:
			return fmt.Errorf("%w: %v", backstop.ErrInvalid, err)
		}
	}
	return err
}
