// Package relay delivers outbox messages to their sinks: NATS JetStream,
// Kafka and HTTP(S) webhooks (docs/brokers.md).
//
// A message is a task of kind backstop.MessageKind on its sink's queue
// (backstop.SinkQueue). The relay is an engine consumer like any worker:
// it claims and settles through the library Worker (Engine.Claim, Decide,
// Settle), so a message the sink refuses follows the task failure path —
// retries by the sink queue's policy, a dead letter with every attempt,
// replay under the same id. A keyed message is an ordered task (its key is
// its ordering key, its sequence its place in publish order), so the
// engine's admission hands the relay one message of a key at a time, in
// order, and a retried message holds its key's later ones back. The
// messages claimed together are published together by a BatchSink (NATS,
// Kafka: asynchronous acknowledgements), each keeping its own outcome.
//
// The relay never writes the store itself and never claims or settles
// another way.
package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/backstophq/backstop"
)

// Config configures a Relay.
type Config struct {
	// Sinks: the sinks to deliver, by name. Required.
	Sinks map[string]Sink
	// Concurrency: messages in flight per sink (of distinct keys).
	// Default: 16.
	Concurrency int
	// Worker is the library worker's configuration (ID, lease, poll,
	// maintenance); Queues and Kinds are the relay's.
	Worker backstop.WorkerConfig
	// MeterProvider records the relay's metrics. Default: otel's global.
	MeterProvider metric.MeterProvider
	Logger        *slog.Logger
}

// Relay delivers the messages of its sinks.
type Relay struct {
	w       *backstop.Worker
	sinks   map[string]Sink     // by queue
	batches map[string]*batcher // by queue, for the sinks that deliver batches
	log     *slog.Logger
	m       instruments
}

type instruments struct {
	published, failed, dead metric.Int64Counter
	sets                    map[string]metric.MeasurementOption // by queue
}

// New makes a relay over c's store.
func New(c *backstop.Client, cfg Config) (*Relay, error) {
	if len(cfg.Sinks) == 0 {
		return nil, fmt.Errorf("relay: no sink")
	}
	wc := cfg.Worker
	wc.Queues = map[string]int{}
	wc.Kinds = []string{backstop.MessageKind}
	r := &Relay{sinks: map[string]Sink{}, batches: map[string]*batcher{}, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if err := r.m.init(mp); err != nil {
		return nil, err
	}
	for name, s := range cfg.Sinks {
		q, err := backstop.SinkQueueName(name)
		if err != nil {
			return nil, err
		}
		wc.Queues[q] = cmp.Or(cfg.Concurrency, 16)
		r.sinks[q] = s
		if bs, ok := s.(BatchSink); ok {
			r.batches[q] = &batcher{s: bs}
		}
		r.m.sets[q] = metric.WithAttributeSet(attribute.NewSet(attribute.String("sink", name)))
	}
	w, err := backstop.NewWorker(c, &wc)
	if err != nil {
		return nil, err
	}
	w.Handle(backstop.MessageKind, backstop.HandlerFunc(r.deliver))
	r.w = w
	return r, nil
}

func (m *instruments) init(mp metric.MeterProvider) error {
	meter := mp.Meter("github.com/backstophq/backstop/internal/relay")
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit("{message}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.published = counter("backstop.sink.messages.published", "Messages a sink acknowledged, by sink.")
	m.failed = counter("backstop.sink.messages.failed", "Delivery attempts a sink failed or refused, by sink.")
	m.dead = counter("backstop.sink.messages.dead_lettered", "Messages dead-lettered by a refused or last delivery attempt, by sink.")
	m.sets = map[string]metric.MeasurementOption{}
	return errors.Join(errs...)
}

// Start starts delivering; Stop ends it.
func (r *Relay) Start(ctx context.Context) error { return r.w.Start(ctx) }

// Stop stops claiming and waits for deliveries in flight (until ctx ends;
// the rest are released uncharged). It does not close the sinks.
func (r *Relay) Stop(ctx context.Context) error { return r.w.Stop(ctx) }

// ID is the relay's worker id.
func (r *Relay) ID() string { return r.w.ID() }

// deliver runs one delivery attempt of a message task.
func (r *Relay) deliver(ctx context.Context, t *backstop.Task) error {
	s, ok := r.sinks[t.Queue]
	if !ok {
		return backstop.Permanent(fmt.Errorf("no sink for queue %q", t.Queue))
	}
	d, err := DeliveryOf(t)
	if err != nil {
		r.m.failed.Add(ctx, 1, r.m.sets[t.Queue])
		r.m.dead.Add(ctx, 1, r.m.sets[t.Queue])
		return err
	}
	if b := r.batches[t.Queue]; b != nil {
		err = b.deliver(ctx, d) // with the other messages claimed with it
	} else {
		err = s.Deliver(ctx, d)
	}
	switch {
	case err == nil:
		r.m.published.Add(ctx, 1, r.m.sets[t.Queue])
	default:
		r.m.failed.Add(ctx, 1, r.m.sets[t.Queue])
		if backstop.IsPermanent(err) || t.Attempt >= t.MaxAttempts {
			r.m.dead.Add(ctx, 1, r.m.sets[t.Queue])
		}
		r.log.Warn("delivery failed", "task_id", t.ID, "queue", t.Queue, "attempt", t.Attempt, "error", err)
	}
	return err
}

// AttrHeaderPrefix prefixes a correlation attribute's header name.
const AttrHeaderPrefix = "Backstop-Attr-"

// DeliveryOf reads a message task: its payload's topic, key, headers and
// body, its id, trace context and attributes as headers. A payload that is
// not a message is poison (permanent).
func DeliveryOf(t *backstop.Task) (*Delivery, error) {
	var m backstop.Message
	if err := json.Unmarshal(t.Payload, &m); err != nil || m.Topic == "" || len(m.Payload) == 0 {
		return nil, backstop.Permanent(fmt.Errorf("payload is not a message (want {\"topic\", \"key\", \"headers\", \"payload\"})"))
	}
	h := make(map[string]string, len(m.Headers)+len(t.Attributes)+2)
	for _, k := range slices.Sorted(maps.Keys(t.Attributes)) {
		h[AttrHeaderPrefix+k] = t.Attributes[k]
	}
	maps.Copy(h, m.Headers)
	h["Backstop-Message-Id"] = t.ID
	if t.TraceParent != "" && !hasHeader(h, "traceparent") {
		h["traceparent"] = t.TraceParent
	}
	return &Delivery{ID: t.ID, Topic: m.Topic, Key: m.Key, Headers: h, Payload: m.Payload}, nil
}

func hasHeader(h map[string]string, name string) bool {
	for k := range h {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}
