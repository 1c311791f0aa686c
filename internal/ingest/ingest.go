// Package ingest turns broker messages into tasks: `backstop ingest` reads
// a Kafka topic (franz-go, a consumer group) or a NATS JetStream subject (a
// durable consumer) and enqueues each message as a task of one queue and
// kind (docs/brokers.md, "Ingest").
//
// It is an engine consumer: every task goes through the library's enqueue
// (Engine.Prepare, then the store), on the database or through a server's
// API; the package writes nothing itself. A message's task id comes from a
// field or header of the message, or from its broker position, so a
// redelivered message is an idempotent enqueue (the same id: the existing
// task, no duplicate). The broker offset is committed, or the message
// acked, only after the enqueue of its batch committed. A message that
// cannot become a task is refused: logged with its broker position,
// counted, and recorded as a task of kind RefusedKind on RefusedQueue
// (which the ingester dead-letters at once, so it sits in the DLQ with its
// reason) before it is acked.
//
// Ingesters of one topic and group may stand in an election (RunElected):
// only the leader reads. An ingester given a store.IngestPositions reports
// its lag there for `backstop relay status`.
package ingest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// The refused messages' queue and kind.
const (
	RefusedQueue = "ingest.refused"
	RefusedKind  = "backstop.ingest.refused"
	// SourceAttr is the attribute naming a task's broker position.
	SourceAttr = "ingest_source"
	// maxRefusedValue bounds the message value a refusal keeps.
	maxRefusedValue = 64 << 10
)

// Position is where a message is in its broker: Kafka topic, partition and
// offset, or a JetStream stream and its stream sequence (Partition 0).
type Position struct {
	Broker    string // "kafka" or "nats"
	Topic     string // Kafka topic, or JetStream stream
	Partition int32
	Offset    int64 // Kafka offset, or stream sequence
}

// String: kafka:TOPIC/PARTITION/OFFSET or nats:STREAM/SEQUENCE.
func (p Position) String() string {
	if p.Broker == "nats" {
		return fmt.Sprintf("nats:%s/%d", p.Topic, p.Offset)
	}
	return fmt.Sprintf("kafka:%s/%d/%d", p.Topic, p.Partition, p.Offset)
}

// idSpace is the UUID name space of position-derived task ids.
var idSpace = uuid.MustParse("6f1d1a9e-9b5c-4c55-9d0e-1b7a3c1f0b24")

// TaskID is the task id a message at p takes on queue when no id option
// names one: the name-based (SHA-1, version 5) UUID of "QUEUE POSITION" in
// a fixed name space. A redelivered message has the same position, so the
// same id.
func (p Position) TaskID(queue string) string {
	return uuid.NewSHA1(idSpace, []byte(queue+" "+p.String())).String()
}

// Message is one broker message.
type Message struct {
	Value    []byte
	Header   func(name string) string // nil: no headers
	Headers  map[string]string        // kept with a refusal
	Position Position
}

// Mapping says how a message becomes a task.
type Mapping struct {
	Queue, Kind string
	// IDField or IDHeader names the task id; neither: the position's
	// TaskID.
	IDField  *Path
	IDHeader string
	// OrderingKeyField and SequenceField, both or neither, put the task
	// on its queue's ordering.
	OrderingKeyField, SequenceField *Path
	// MaxAttempts of each task (0: the queue's or client's default).
	MaxAttempts int
}

// Refusal is why a message cannot become a task.
type Refusal struct {
	Reason string // a short label: not_json, id, ordering_key, sequence, invalid
	Err    error
}

func (r *Refusal) Error() string { return r.Err.Error() }

// Task maps a message to its enqueue; a message that cannot become a task
// gives a *Refusal.
func (m *Mapping) Task(msg *Message) (backstop.EnqueueParams, error) {
	p := backstop.EnqueueParams{Queue: m.Queue, Kind: m.Kind, Payload: msg.Value, MaxAttempts: m.MaxAttempts,
		Attributes: map[string]string{SourceAttr: msg.Position.String()}}
	doc, err := Decode(msg.Value)
	if err != nil {
		return p, &Refusal{"not_json", err}
	}
	switch {
	case m.IDField != nil:
		if p.ID, err = m.IDField.Text(doc); err != nil {
			return p, &Refusal{"id", err}
		}
	case m.IDHeader != "":
		if msg.Header != nil {
			p.ID = msg.Header(m.IDHeader)
		}
		if p.ID == "" {
			return p, &Refusal{"id", fmt.Errorf("header %s is missing", m.IDHeader)}
		}
	default:
		p.ID = msg.Position.TaskID(m.Queue)
	}
	if err := backstop.ValidID(p.ID); err != nil {
		return p, &Refusal{"id", fmt.Errorf("task id: %v", err)}
	}
	if m.OrderingKeyField != nil {
		if p.OrderingKey, err = m.OrderingKeyField.Text(doc); err != nil {
			return p, &Refusal{"ordering_key", err}
		}
		if p.OrderingKey == "" {
			return p, &Refusal{"ordering_key", fmt.Errorf("field %s is empty", m.OrderingKeyField)}
		}
	}
	if m.SequenceField != nil {
		if p.Sequence, err = m.SequenceField.Int(doc); err != nil {
			return p, &Refusal{"sequence", err}
		}
	}
	return p, nil
}

// Enqueuer is where tasks go: a *backstop.Client, or a server's API
// client. A batch is all or nothing; an id that exists is an error
// wrapping backstop.ErrConflict, bad input one wrapping ErrInvalid or
// ErrTooLarge (in a *backstop.BatchError naming the record).
type Enqueuer interface {
	EnqueueMany(ctx context.Context, ps []backstop.EnqueueParams) ([]backstop.EnqueueResult, error)
}

// Ingester enqueues batches of messages.
type Ingester struct {
	enq Enqueuer
	m   Mapping
	log *slog.Logger
	ins instruments
	set metric.MeasurementOption

	lagAttrs metric.MeasurementOption // queue and topic (SetSource)

	positions store.IngestPositions
	id        string

	mu        sync.Mutex
	group     string // the source's (SetSource)
	topic     string
	reported  time.Time
	lastErr   string
	lastErrAt *time.Time
	lag       map[int32]int64 // by partition (NATS: 0)
	times     map[int32]partitionTimes
	totals    Counts
}

// partitionTimes date a partition's messages (the broker's timestamps).
type partitionTimes struct {
	reading time.Time // the oldest message read and not yet committed (zero: none)
	newest  time.Time // the newest message committed
}

// Config configures an Ingester.
type Config struct {
	Enqueuer      Enqueuer
	Mapping       Mapping
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider // nil: none
	// Positions, when set, receives the ingester's report (its lag and
	// last error) about every ReportEvery while it reads, for `backstop
	// relay status` and GET /v1/relay. ID names the reporter.
	Positions store.IngestPositions
	ID        string
}

// ReportEvery is how often a reading ingester reports its position.
const ReportEvery = time.Second

// New makes an ingester.
func New(cfg Config) (*Ingester, error) {
	if cfg.Enqueuer == nil || cfg.Mapping.Queue == "" || cfg.Mapping.Kind == "" {
		return nil, errors.New("ingest: an enqueuer, a queue and a kind are required")
	}
	if (cfg.Mapping.OrderingKeyField == nil) != (cfg.Mapping.SequenceField == nil) {
		return nil, errors.New("ingest: an ordering key field and a sequence field go together")
	}
	in := &Ingester{enq: cfg.Enqueuer, m: cfg.Mapping, positions: cfg.Positions, id: cfg.ID, log: cmp.Or(cfg.Logger, slog.Default()), lag: map[int32]int64{}, times: map[int32]partitionTimes{},
		set: metric.WithAttributeSet(attribute.NewSet(attribute.String("queue", cfg.Mapping.Queue)))}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	in.lagAttrs = in.set
	if err := in.ins.init(mp, in); err != nil {
		return nil, err
	}
	return in, nil
}

type instruments struct {
	ingested, duplicate, refused metric.Int64Counter
	reg                          metric.Registration
}

// The lag's attributes: the queue, and the topic (Kafka) or subject (NATS).
func (in *Ingester) lagSet() metric.MeasurementOption {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lagAttrs
}

func (ins *instruments) init(mp metric.MeterProvider, in *Ingester) error {
	meter := mp.Meter("github.com/backstophq/backstop/internal/ingest")
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit("{message}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	ins.ingested = counter("backstop.ingest.messages.ingested", "Broker messages enqueued as new tasks, by queue.")
	ins.duplicate = counter("backstop.ingest.messages.duplicate", "Redelivered broker messages whose task already existed, by queue.")
	ins.refused = counter("backstop.ingest.messages.refused", "Broker messages that could not become a task, by queue and reason.")
	lag, err := meter.Int64ObservableGauge("backstop.ingest.lag", metric.WithUnit("{message}"),
		metric.WithDescription("Messages in the broker not yet ingested, by queue (Kafka: high watermark minus the next offset, summed over partitions; NATS: the consumer's pending count)."))
	errs = append(errs, err)
	lagSeconds, err2 := meter.Float64ObservableGauge("backstop.ingest.lag_seconds", metric.WithUnit("s"),
		metric.WithDescription("How far behind the broker the ingester is in time, by queue and topic: the age of the oldest message read and not yet committed, else, while messages wait, the time since the newest committed message's broker timestamp; 0 when caught up."))
	errs = append(errs, err2)
	if err == nil && err2 == nil {
		ins.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			o.ObserveInt64(lag, in.Lag(), in.set)
			o.ObserveFloat64(lagSeconds, in.LagSeconds(time.Now()), in.lagSet())
			return nil
		}, lag, lagSeconds)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// SetSource names the consumer group and the topic (Kafka) or subject
// (NATS) the ingester reads, for the lag's attributes and its reports.
func (in *Ingester) SetSource(group, topic string) {
	in.mu.Lock()
	in.group, in.topic = group, topic
	in.lagAttrs = metric.WithAttributeSet(attribute.NewSet(attribute.String("queue", in.m.Queue), attribute.String("topic", topic)))
	in.mu.Unlock()
}

// SetLag records the messages behind in one partition (NATS: 0).
func (in *Ingester) SetLag(partition int32, n int64) {
	in.mu.Lock()
	in.lag[partition] = max(n, 0)
	in.mu.Unlock()
}

// Reading records that a partition's messages from one dated at are being
// enqueued (the oldest of a polled batch).
func (in *Ingester) Reading(partition int32, at time.Time) {
	in.mu.Lock()
	t := in.times[partition]
	if t.reading.IsZero() || at.Before(t.reading) {
		t.reading = at
	}
	in.times[partition] = t
	in.mu.Unlock()
}

// Committed records that a partition's messages up to one dated newest
// are enqueued and committed (acked).
func (in *Ingester) Committed(partition int32, newest time.Time) {
	in.mu.Lock()
	t := in.times[partition]
	t.reading = time.Time{}
	if newest.After(t.newest) {
		t.newest = newest
	}
	in.times[partition] = t
	in.mu.Unlock()
}

// LagSeconds is how far behind the broker the ingester is at now, the
// most of any partition: the age of the oldest message read and not yet
// committed; else, while messages wait in the partition, the time since
// its newest committed message (an upper bound of the next one's age);
// else 0.
func (in *Ingester) LagSeconds(now time.Time) float64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	var lag time.Duration
	for p, t := range in.times {
		switch {
		case !t.reading.IsZero():
			lag = max(lag, now.Sub(t.reading))
		case in.lag[p] > 0 && !t.newest.IsZero():
			lag = max(lag, now.Sub(t.newest))
		}
	}
	return max(lag, 0).Seconds()
}

// noteError records the outcome of a batch's enqueue: its error, or none
// once one committed.
func (in *Ingester) noteError(err error, now time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if err == nil {
		in.lastErr, in.lastErrAt = "", nil
		return
	}
	in.lastErr, in.lastErrAt = truncate(err.Error(), 1000), &now
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Position is the ingester's report at now.
func (in *Ingester) Position(now time.Time) store.IngestPosition {
	in.mu.Lock()
	defer in.mu.Unlock()
	p := store.IngestPosition{Group: in.group, Topic: in.topic, Queue: in.m.Queue, Holder: in.id, UpdatedAt: now,
		LastError: in.lastErr, LastErrorAt: in.lastErrAt}
	var from time.Time
	for part, t := range in.times {
		switch {
		case !t.reading.IsZero() && (from.IsZero() || t.reading.Before(from)):
			from = t.reading
		case t.reading.IsZero() && in.lag[part] > 0 && !t.newest.IsZero() && (from.IsZero() || t.newest.Before(from)):
			from = t.newest
		}
	}
	for _, n := range in.lag {
		p.LagMessages += n
	}
	if !from.IsZero() {
		p.LagFrom = &from
	}
	return p
}

// report saves the position when ReportEvery passed since the last one
// (force: now); a failure is logged, not returned.
func (in *Ingester) report(ctx context.Context, force bool) {
	if in.positions == nil {
		return
	}
	now := time.Now()
	in.mu.Lock()
	due := force || now.Sub(in.reported) >= ReportEvery
	if due {
		in.reported = now
	}
	in.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := in.positions.SaveIngestPosition(ctx, in.Position(now)); err != nil {
		in.log.Warn("ingest: saving the position failed", "queue", in.m.Queue, "error", err)
	}
}

// resetLag forgets the lag when the ingester stops reading (a stand-by
// reports none).
func (in *Ingester) resetLag() {
	in.mu.Lock()
	clear(in.lag)
	clear(in.times)
	in.mu.Unlock()
}

// Lag is the messages behind, summed over partitions.
func (in *Ingester) Lag() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	var n int64
	for _, v := range in.lag {
		n += v
	}
	return n
}

// Totals is what every Ingest call so far did, summed.
func (in *Ingester) Totals() Counts {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.totals
}

// Close unregisters the lag gauge.
func (in *Ingester) Close() {
	if in.ins.reg != nil {
		_ = in.ins.reg.Unregister()
	}
}

// Counts is what one Ingest call did.
type Counts struct{ Ingested, Duplicate, Refused int }

// Ingest makes every message of a batch a task, or records it as refused.
// It returns nil only when all of that committed: the caller then commits
// the offsets or acks the messages. An error (the database or server
// unavailable) means nothing may be committed; the same batch is to be
// ingested again, which is idempotent.
func (in *Ingester) Ingest(ctx context.Context, msgs []*Message) (Counts, error) {
	var (
		c       Counts
		params  []backstop.EnqueueParams
		of      []*Message
		refused []refusal
	)
	for _, msg := range msgs {
		p, err := in.m.Task(msg)
		var r *Refusal
		if errors.As(err, &r) {
			refused = append(refused, refusal{msg, r})
			continue
		}
		params, of = append(params, p), append(of, msg)
	}
	for len(params) > 0 {
		rs, err := in.enq.EnqueueMany(ctx, params)
		var be *backstop.BatchError
		switch {
		case err == nil:
			for _, r := range rs {
				if r.Duplicate || r.Merged {
					c.Duplicate++
				} else {
					c.Ingested++
				}
			}
			params = nil
		case errors.As(err, &be) && badInput(be.Err):
			// Prepare refused one record (e.g. too large): it is refused,
			// the rest go again.
			refused = append(refused, refusal{of[be.Index], &Refusal{"invalid", be.Err}})
			params = append(params[:be.Index:be.Index], params[be.Index+1:]...)
			of = append(of[:be.Index:be.Index], of[be.Index+1:]...)
		case errors.Is(err, backstop.ErrConflict) || badInput(err):
			// A task of the batch exists (a redelivery): one at a time.
			for i, p := range params {
				n, dup, r, err := in.one(ctx, p)
				if err != nil {
					return c, err
				}
				c.Ingested, c.Duplicate = c.Ingested+n, c.Duplicate+dup
				if r != nil {
					refused = append(refused, refusal{of[i], r})
				}
			}
			params = nil
		default:
			return c, err
		}
	}
	if len(refused) > 0 {
		if err := in.refuse(ctx, refused); err != nil {
			return c, err
		}
		c.Refused = len(refused)
	}
	in.ins.ingested.Add(ctx, int64(c.Ingested), in.set)
	in.ins.duplicate.Add(ctx, int64(c.Duplicate), in.set)
	in.mu.Lock()
	in.totals.Ingested += c.Ingested
	in.totals.Duplicate += c.Duplicate
	in.totals.Refused += c.Refused
	in.mu.Unlock()
	return c, nil
}

// one enqueues one task: a new task, an existing one, or a refusal.
func (in *Ingester) one(ctx context.Context, p backstop.EnqueueParams) (n, dup int, r *Refusal, err error) {
	rs, err := in.enq.EnqueueMany(ctx, []backstop.EnqueueParams{p})
	switch {
	case err == nil && (rs[0].Duplicate || rs[0].Merged), errors.Is(err, backstop.ErrConflict):
		return 0, 1, nil, nil
	case err == nil:
		return 1, 0, nil, nil
	case badInput(err):
		var be *backstop.BatchError
		if errors.As(err, &be) {
			err = be.Err
		}
		return 0, 0, &Refusal{"invalid", err}, nil
	}
	return 0, 0, nil, err
}

func badInput(err error) bool {
	return errors.Is(err, backstop.ErrInvalid) || errors.Is(err, backstop.ErrTooLarge)
}

type refusal struct {
	msg *Message
	r   *Refusal
}

// RefusedPayload is a refused message's record: the task payload of kind
// RefusedKind.
type RefusedPayload struct {
	Reason string `json:"reason"`
	Error  string `json:"error"`
	Queue  string `json:"queue"`
	Kind   string `json:"kind"`
	Source string `json:"source"`
	// Value is the message value as text (when UTF-8), else ValueBase64;
	// at most 64 KiB of it (Truncated).
	Value       string            `json:"value,omitempty"`
	ValueBase64 []byte            `json:"value_base64,omitempty"`
	Truncated   bool              `json:"truncated,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
}

// refuse records refused messages: logged, counted, and enqueued as
// RefusedKind tasks (ids from their positions, so a redelivered refusal
// is recorded once).
func (in *Ingester) refuse(ctx context.Context, rs []refusal) error {
	ps := make([]backstop.EnqueueParams, len(rs))
	for i, r := range rs {
		rp := RefusedPayload{Reason: r.r.Reason, Error: r.r.Error(), Queue: in.m.Queue, Kind: in.m.Kind,
			Source: r.msg.Position.String(), Headers: r.msg.Headers}
		v := r.msg.Value
		if len(v) > maxRefusedValue {
			v, rp.Truncated = v[:maxRefusedValue], true
		}
		if utf8.Valid(v) {
			rp.Value = string(v)
		} else {
			rp.ValueBase64 = v
		}
		body, err := json.Marshal(rp)
		if err != nil {
			return err
		}
		ps[i] = backstop.EnqueueParams{ID: r.msg.Position.TaskID(RefusedQueue + " " + in.m.Queue), Queue: RefusedQueue,
			Kind: RefusedKind, Payload: body, MaxAttempts: 1,
			Attributes: map[string]string{SourceAttr: r.msg.Position.String(), "ingest_queue": in.m.Queue}}
		in.log.Warn("message refused", "source", rp.Source, "queue", in.m.Queue, "reason", rp.Reason, "error", rp.Error)
	}
	if _, err := in.enq.EnqueueMany(ctx, ps); err != nil {
		if !errors.Is(err, backstop.ErrConflict) {
			return fmt.Errorf("recording refused messages: %w", err)
		}
		for _, p := range ps {
			if _, err := in.enq.EnqueueMany(ctx, []backstop.EnqueueParams{p}); err != nil && !errors.Is(err, backstop.ErrConflict) {
				return fmt.Errorf("recording refused message %s: %w", p.Attributes[SourceAttr], err)
			}
		}
	}
	for _, r := range rs {
		in.ins.refused.Add(ctx, 1, metric.WithAttributes(attribute.String("queue", in.m.Queue), attribute.String("reason", r.r.Reason)))
	}
	return nil
}

// RefusedWorker dead-letters the refused messages' tasks at once (their
// handler fails them permanently with the refusal's error), so each sits
// in the DLQ with its reason, its broker position and value.
func RefusedWorker(c *backstop.Client, wc backstop.WorkerConfig) (*backstop.Worker, error) {
	wc.Queues = map[string]int{RefusedQueue: 1}
	wc.Kinds = []string{RefusedKind}
	w, err := backstop.NewWorker(c, &wc)
	if err != nil {
		return nil, err
	}
	w.Handle(RefusedKind, backstop.HandlerFunc(func(_ context.Context, t *backstop.Task) error {
		var rp RefusedPayload
		_ = json.Unmarshal(t.Payload, &rp)
		return backstop.Permanent(fmt.Errorf("refused by ingest (%s) at %s: %s", rp.Reason, rp.Source, rp.Error))
	}))
	return w, nil
}

// retry runs fn until it succeeds or ctx ends, backing off 100ms..10s.
func retry(ctx context.Context, log *slog.Logger, what string, fn func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return cmp.Or(ctx.Err(), err)
		}
		log.Warn(what+" failed; retrying", "error", err, "in", wait.String())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 10*time.Second)
	}
}
