package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Source is where messages come from: Kafka or NATS JetStream.
type Source struct {
	// URL: kafka://HOST:PORT[?brokers=H:P,...] or nats://HOST:PORT.
	URL string
	// Topic (Kafka) or Subject (NATS): exactly the one of the scheme.
	Topic, Subject string
	// Group: the Kafka consumer group, or the JetStream durable consumer.
	// Default: DefaultGroup(queue).
	Group string
	// Batch: most messages enqueued in one transaction. Default 500.
	Batch int
	// IdleExit: Run returns once it is caught up and no message arrived
	// for this long (0: never; it runs until its context ends). Kafka: the
	// group assigned it partitions; NATS: no message of the consumer is
	// pending or awaiting its ack (e.g. from a killed ingester).
	IdleExit time.Duration
	// AckWait (NATS): a message not acked this long after its delivery is
	// delivered again (the durable consumer's AckWait). Default 30s.
	AckWait time.Duration
}

// SessionTimeout is the Kafka consumer group session: a killed ingester's
// partitions move to the others after it.
const SessionTimeout = 10 * time.Second

// idle tracks the time since the last message, for Source.IdleExit.
type idle struct {
	after time.Duration
	last  time.Time
}

func (i *idle) seen()      { i.last = time.Now() }
func (i *idle) over() bool { return i.after > 0 && time.Since(i.last) >= i.after }

// DefaultGroup is the consumer group (or durable) of an ingester into
// queue when none is named: backstop-ingest-QUEUE, with characters other
// than letters, digits, '_' and '-' as '_' (a JetStream durable name's
// rule, kept for Kafka too so one name works on both).
func DefaultGroup(queue string) string {
	return "backstop-ingest-" + groupBad.ReplaceAllString(queue, "_")
}

var groupBad = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// Check validates a source; the error names the flag at fault.
func (s *Source) Check() error { return s.check(FlagName) }

// check validates a source; the error names the setting with name.
func (s *Source) check(name KeyName) error {
	u, err := url.Parse(s.URL)
	if err != nil {
		return fmt.Errorf("%s %q is not a URL: %v", name("from"), s.URL, err)
	}
	if u.Host == "" && (u.Scheme == "kafka" || u.Scheme == "nats") {
		return fmt.Errorf("%s %q: missing host", name("from"), s.URL)
	}
	switch u.Scheme {
	case "kafka":
		if s.Subject != "" {
			return fmt.Errorf("%s is for nats:// sources; a kafka:// source reads %s", name("subject"), name("topic"))
		}
		if s.Topic == "" {
			return fmt.Errorf("%s is required with a kafka:// source", name("topic"))
		}
	case "nats":
		if s.Topic != "" {
			return fmt.Errorf("%s is for kafka:// sources; a nats:// source reads %s", name("topic"), name("subject"))
		}
		if s.Subject == "" {
			return fmt.Errorf("%s is required with a nats:// source", name("subject"))
		}
		if strings.ContainsAny(s.Subject, " \t\r\n") {
			return fmt.Errorf("%s %q: a subject has no white space", name("subject"), s.Subject)
		}
		if s.Group != "" && groupBad.MatchString(s.Group) {
			return fmt.Errorf("%s %q: a JetStream durable name is letters, digits, '_' and '-'", name("group"), s.Group)
		}
	default:
		return fmt.Errorf("%s %q: scheme must be kafka:// or nats://", name("from"), s.URL)
	}
	if s.Batch < 0 || s.Batch > 10000 {
		return fmt.Errorf("%s %d: want 1 to 10000", name("batch"), s.Batch)
	}
	if s.IdleExit < 0 {
		return fmt.Errorf("%s must not be negative", name("exit_after_idle"))
	}
	if s.AckWait != 0 && s.AckWait < time.Second {
		return fmt.Errorf("%s must be at least 1s", name("ack_wait"))
	}
	return nil
}

// Run ingests from the source until ctx ends: it polls a batch, hands it
// to in.Ingest (retried until it commits), then commits the offsets or
// acks the messages. A process killed between the enqueue and the commit
// gets the batch again, which is idempotent.
func Run(ctx context.Context, src Source, in *Ingester, log *slog.Logger) error {
	if err := src.Check(); err != nil {
		return err
	}
	src.Group = src.group(in.m.Queue)
	if src.Batch == 0 {
		src.Batch = 500
	}
	if src.AckWait == 0 {
		src.AckWait = 30 * time.Second
	}
	if log == nil {
		log = in.log
	}
	in.SetSource(src.Group, src.Topic+src.Subject)
	defer in.resetLag()
	u, _ := url.Parse(src.URL)
	if u.Scheme == "kafka" {
		return runKafka(ctx, u, src, in, log)
	}
	return runNATS(ctx, u, src, in, log)
}

func runKafka(ctx context.Context, u *url.URL, src Source, in *Ingester, log *slog.Logger) error {
	seeds := []string{u.Host}
	if more := u.Query().Get("brokers"); more != "" {
		seeds = append(seeds, strings.Split(more, ",")...)
	}
	var assigned atomic.Bool
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(src.Group), kgo.ConsumeTopics(src.Topic), kgo.SessionTimeout(SessionTimeout),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { assigned.Store(true) }),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Offsets are committed by hand, after the enqueue committed; no
		// rebalance while a polled batch is being enqueued.
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(time.Second))
	if err != nil {
		return fmt.Errorf("kafka %s: %w", u.Host, err)
	}
	defer cl.Close()
	log.Info("ingesting", "from", u.Redacted(), "topic", src.Topic, "group", src.Group, "queue", in.m.Queue)
	idle := &idle{after: src.IdleExit, last: time.Now()}
	for !assigned.Load() || !idle.over() {
		if !assigned.Load() {
			idle.seen() // not caught up before the group assigned partitions
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollRecords(pctx, src.Batch)
		cancel()
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				log.Warn("kafka fetch", "topic", t, "partition", p, "error", err)
			}
		})
		var (
			recs   []*kgo.Record
			msgs   []*Message
			newest = map[int32]time.Time{}
		)
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				in.SetLag(p.Partition, p.HighWatermark-p.Records[len(p.Records)-1].Offset-1)
				in.Reading(p.Partition, p.Records[0].Timestamp)
				newest[p.Partition] = p.Records[len(p.Records)-1].Timestamp
			}
			for _, r := range p.Records {
				recs = append(recs, r)
				msgs = append(msgs, kafkaMessage(r))
			}
		})
		if len(msgs) == 0 {
			cl.AllowRebalance()
			if assigned.Load() {
				in.report(ctx, false)
			}
			continue
		}
		idle.seen()
		if err := retry(ctx, log, "enqueue", func() error { return in.ingestBatch(ctx, msgs) }); err != nil {
			cl.AllowRebalance()
			return nil // ctx ended: nothing committed, the batch comes again
		}
		// Committed even when ctx ended meanwhile: the enqueue did.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := cl.CommitRecords(cctx, recs...); err != nil {
			// Not committed: the records come again, an idempotent enqueue.
			log.Warn("kafka commit", "error", err)
		}
		cancel()
		for p, at := range newest {
			in.Committed(p, at)
		}
		in.report(ctx, false)
		cl.AllowRebalance()
	}
	return nil
}

func kafkaMessage(r *kgo.Record) *Message {
	m := &Message{Value: r.Value, Position: Position{Broker: "kafka", Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}}
	if len(r.Headers) > 0 {
		m.Headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			m.Headers[h.Key] = string(h.Value)
		}
		m.Header = func(name string) string { return m.Headers[name] }
	}
	return m
}

func runNATS(ctx context.Context, u *url.URL, src Source, in *Ingester, log *slog.Logger) error {
	server := *u
	server.RawQuery = ""
	nc, err := nats.Connect(server.String(), nats.Name("backstop ingest "+src.Group),
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("nats %s: %w", server.Redacted(), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var (
		cons     jetstream.Consumer
		noStream error
	)
	err = retry(ctx, log, "nats consumer", func() error {
		stream, err := js.StreamNameBySubject(ctx, src.Subject)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			// Not a passing failure: nothing would ever be read.
			noStream = fmt.Errorf("no JetStream stream covers subject %s: create one (e.g. nats stream add)", src.Subject)
			return nil
		}
		if err != nil {
			return err
		}
		cons, err = js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: src.Group, FilterSubject: src.Subject,
			AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
			AckWait: src.AckWait, MaxAckPending: max(4*src.Batch, 1000),
		})
		return err
	})
	if err != nil {
		return nil // ctx ended
	}
	if noStream != nil {
		return noStream
	}
	log.Info("ingesting", "from", server.Redacted(), "subject", src.Subject, "durable", src.Group, "queue", in.m.Queue)
	idle := &idle{after: src.IdleExit, last: time.Now()}
	for ctx.Err() == nil && !idle.over() {
		batch, err := cons.FetchNoWait(src.Batch)
		var msgs []*Message
		var raw []jetstream.Msg
		if err == nil {
			for m := range batch.Messages() {
				raw = append(raw, m)
			}
			err = batch.Error()
		}
		if len(raw) == 0 && err == nil {
			// Nothing pending: wait for the next message (or a second).
			if batch, err = cons.Fetch(src.Batch, jetstream.FetchMaxWait(time.Second)); err == nil {
				for m := range batch.Messages() {
					raw = append(raw, m)
				}
				err = batch.Error()
			}
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			log.Warn("nats fetch", "error", err)
			if len(raw) == 0 {
				sleep(ctx, time.Second)
				continue
			}
		}
		if len(raw) == 0 {
			if info, err := cons.Info(ctx); err == nil {
				in.SetLag(0, int64(info.NumPending))
				if info.NumAckPending > 0 || info.NumPending > 0 {
					idle.seen() // a killed ingester's messages come back after AckWait
				}
			}
			in.report(ctx, false)
			continue
		}
		idle.seen()
		var newest time.Time
		for i, m := range raw {
			msg := &Message{Value: m.Data()}
			if md, err := m.Metadata(); err == nil {
				msg.Position = Position{Broker: "nats", Topic: md.Stream, Offset: int64(md.Sequence.Stream)}
				in.SetLag(0, int64(md.NumPending))
				if i == 0 {
					in.Reading(0, md.Timestamp)
				}
				newest = md.Timestamp
			}
			if h := m.Headers(); len(h) > 0 {
				msg.Headers = make(map[string]string, len(h))
				for k := range h {
					msg.Headers[k] = h.Get(k)
				}
				msg.Header = h.Get
			}
			msgs = append(msgs, msg)
		}
		if err := retry(ctx, log, "enqueue", func() error { return in.ingestBatch(ctx, msgs) }); err != nil {
			return nil // ctx ended: nothing acked, the messages come again
		}
		for _, m := range raw {
			if err := m.Ack(); err != nil {
				// Not acked: redelivered after AckWait, an idempotent enqueue.
				log.Warn("nats ack", "error", err)
			}
		}
		in.Committed(0, newest)
		in.report(ctx, false)
	}
	_ = nc.Flush()
	return nil
}

// ingestBatch ingests one batch and notes its outcome (reported at once
// when it failed).
func (in *Ingester) ingestBatch(ctx context.Context, msgs []*Message) error {
	_, err := in.Ingest(ctx, msgs)
	if ctx.Err() != nil {
		return err
	}
	in.noteError(err, time.Now())
	if err != nil {
		in.report(ctx, true)
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
