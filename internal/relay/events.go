package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/leadership"
	"github.com/backstophq/backstop/redact"
	"github.com/backstophq/backstop/store"
)

// The event-log relay follows streams of the event log from a durable,
// named checkpoint and publishes each event's envelope to a sink, with the
// event id as the broker's message id. The checkpoint (one row per stream,
// store.RelayCheckpoints) moves only after the sink acknowledged the events
// before it, so a relay that dies publishes the events after its last
// checkpoint again: the broker removes those repeats where it
// de-duplicates (JetStream's Nats-Msg-Id), and they are counted.

// DefaultEventTopic is the topic of an event: {type} is the event's type
// (backstop.events.task.succeeded).
const DefaultEventTopic = "backstop.events.{type}"

// EventsConfig configures an EventRelay.
type EventsConfig struct {
	// Sink receives the events; SinkName names it (its metrics, the
	// checkpoint's row). Required.
	Sink     Sink
	SinkName string
	// Checkpoint names the durable position. Required.
	Checkpoint string
	// Streams are the streams to follow (ParseStreams). Required.
	Streams []string
	// Topic is the topic template (CheckTopic). Default: DefaultEventTopic.
	Topic string
	// PollInterval is how often a caught-up stream looks for new events.
	// Default: 200ms.
	PollInterval time.Duration
	// Batch is how many events one read takes (the checkpoint moves once
	// per read). A sink that is a BatchSink (NATS, Kafka) publishes a
	// read's events at once and waits once for their acknowledgements.
	// Default: 500.
	Batch int
	// From is where a checkpoint's stream starts when it has no row yet:
	// FromStart (default) the beginning of the log, FromEnd its end (the
	// events appended from then on). A stream the checkpoint already has
	// resumes from its cursor whatever From says.
	From string
	// LeaderTTL, when set, makes the relay a candidate in the election of
	// its checkpoint (the lease relay.<checkpoint> in backstop_leaders):
	// only the leader publishes, so relays following one checkpoint never
	// publish at once; another takes over within the TTL when the leader
	// dies, at once when it stops. 0: no election.
	LeaderTTL time.Duration
	// ID names this candidate in the lease. Required with LeaderTTL.
	ID            string
	MeterProvider metric.MeterProvider
	Logger        *slog.Logger
}

// EventsConfig.From's values.
const (
	FromStart = "start"
	FromEnd   = "end"
)

// LeaseName is the leadership lease of a checkpoint's relays.
func LeaseName(checkpoint string) string { return "relay." + checkpoint }

// EventRelay publishes event streams to a sink.
type EventRelay struct {
	c    *backstop.Client
	cfg  EventsConfig
	mask *redact.Masker
	log  *slog.Logger
	m    eventInstruments

	el *leadership.Elector // nil: no election

	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type eventInstruments struct {
	published, duplicates, failed metric.Int64Counter
	sets                          map[string]metric.MeasurementOption // by stream
}

// ParseStreams reads --streams: a comma-separated list of event streams
// (all, type.T, queue.Q, run.R, task.ID, worker.ID, node.H, execution.ID,
// audit; docs/events.md), each once; all stands alone (it holds every
// event).
func ParseStreams(spec string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("--streams %q: an empty stream name", spec)
		}
		st, err := store.ParseStream(part)
		if err != nil {
			return nil, fmt.Errorf("--streams: %v", err)
		}
		name := st.String()
		if seen[name] {
			return nil, fmt.Errorf("--streams: %s is given twice", name)
		}
		seen[name] = true
		out = append(out, name)
	}
	if seen[string(store.StreamAll)] && len(out) > 1 {
		return nil, fmt.Errorf("--streams %q: all holds every event; give it alone", spec)
	}
	return out, nil
}

// CheckTopic checks an event topic template: a NATS subject and Kafka
// topic once {type} is replaced, with {type} at most once and only as its
// last token (so that the stream the NATS sink creates covers every type
// with one wildcard, PREFIX.>).
func CheckTopic(tmpl string) error {
	if tmpl == "" {
		return errors.New("the event topic is empty")
	}
	if n := strings.Count(tmpl, "{type}"); n > 1 || n == 1 && !strings.HasSuffix(tmpl, ".{type}") {
		return fmt.Errorf("event topic %q: {type} may appear once, as the last token (PREFIX.{type})", tmpl)
	}
	plain := strings.ReplaceAll(tmpl, "{type}", "t")
	for _, r := range plain {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("event topic %q: only letters, digits, '.', '_' and '-' (and {type})", tmpl)
		}
	}
	if strings.HasPrefix(plain, ".") || strings.HasSuffix(plain, ".") || strings.Contains(plain, "..") {
		return fmt.Errorf("event topic %q: an empty token", tmpl)
	}
	if len(plain) > 200 {
		return fmt.Errorf("event topic %q: at most 200 bytes", tmpl)
	}
	return nil
}

// NewEvents makes an event relay over c's event log.
func NewEvents(c *backstop.Client, cfg EventsConfig) (*EventRelay, error) {
	if cfg.Sink == nil || cfg.SinkName == "" {
		return nil, errors.New("relay: events: no sink")
	}
	if cfg.Checkpoint == "" || len(cfg.Checkpoint) > 200 {
		return nil, fmt.Errorf("relay: checkpoint %q: want a name of 1-200 bytes", cfg.Checkpoint)
	}
	if len(cfg.Streams) == 0 {
		return nil, errors.New("relay: events: no stream")
	}
	if _, err := ParseStreams(strings.Join(cfg.Streams, ",")); err != nil {
		return nil, err
	}
	if cfg.Topic == "" {
		cfg.Topic = DefaultEventTopic
	}
	if err := CheckTopic(cfg.Topic); err != nil {
		return nil, err
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	if cfg.Batch <= 0 || cfg.Batch > store.MaxEventLimit {
		cfg.Batch = 500
	}
	if cfg.LeaderTTL > 0 && cfg.ID == "" {
		return nil, errors.New("relay: events: an election needs the candidate's ID")
	}
	switch cfg.From {
	case "":
		cfg.From = FromStart
	case FromStart, FromEnd:
	default:
		return nil, fmt.Errorf("relay: events: from %q: want %s or %s", cfg.From, FromStart, FromEnd)
	}
	r := &EventRelay{c: c, cfg: cfg, mask: c.Masker(), log: cfg.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	if cfg.LeaderTTL > 0 {
		r.el = leadership.New(c.Store(), leadership.Config{Name: LeaseName(cfg.Checkpoint), ID: cfg.ID, TTL: cfg.LeaderTTL,
			Now: c.Engine().Now, Logger: r.log})
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter("github.com/backstophq/backstop/internal/relay")
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit("{event}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	r.m.published = counter("backstop.relay.events.published", "Events the sink acknowledged, by checkpoint and sink.")
	r.m.duplicates = counter("backstop.relay.events.duplicates", "Events published again after a crash that the broker removed as repeats (JetStream's de-duplication), by checkpoint and sink.")
	r.m.failed = counter("backstop.relay.events.failed", "Event publishes that failed (retried), by checkpoint and sink.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r.m.sets = map[string]metric.MeasurementOption{}
	for _, s := range cfg.Streams {
		r.m.sets[s] = metric.WithAttributeSet(attribute.NewSet(attribute.String("checkpoint", cfg.Checkpoint),
			attribute.String("sink", cfg.SinkName)))
	}
	return r, nil
}

// Start starts following each stream (one goroutine each) — with an
// election, once this candidate leads, and until it no longer does. The
// checkpoint's rows are created when missing, at the beginning of the log
// or, with From FromEnd, at its end; an existing row is never moved.
func (r *EventRelay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return errors.New("relay: events already started")
	}
	var from string // the cursor a new row starts at: "" is the log's beginning
	if r.cfg.From == FromEnd {
		end, err := r.c.Store().EventsEnd(ctx)
		if err != nil {
			return err
		}
		from = end
	}
	for _, s := range r.cfg.Streams {
		if err := r.c.Store().SaveRelayCheckpoint(ctx, store.RelayCheckpointUpdate{Name: r.cfg.Checkpoint, Stream: s,
			Sink: r.cfg.SinkName, Cursor: from, Now: r.c.Engine().Now(), Create: true}); err != nil {
			return err
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if r.el == nil {
		stop, err := r.startFollowing(runCtx)
		if err != nil {
			cancel()
			return err
		}
		r.cancel = func() { cancel(); stop() }
		return nil
	}
	r.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.campaign(runCtx)
	}()
	return nil
}

// campaign takes part in the checkpoint's election until ctx ends: it
// follows the streams while it leads, and stops following (what was
// acknowledged is checkpointed) when it loses the lease.
func (r *EventRelay) campaign(ctx context.Context) {
	period := max(r.cfg.LeaderTTL/6, 10*time.Millisecond)
	tick := time.NewTicker(period)
	defer tick.Stop()
	var stop func()
	for {
		r.el.Round(ctx)
		switch leading := r.el.IsLeader(); {
		case leading && stop == nil:
			var err error
			if stop, err = r.startFollowing(ctx); err != nil {
				r.log.Warn("relay: starting to follow failed; retrying", "checkpoint", r.cfg.Checkpoint, "error", err)
			}
		case !leading && stop != nil:
			stop()
			stop = nil
		}
		select {
		case <-ctx.Done():
			if stop != nil {
				stop()
			}
			r.el.Resign()
			return
		case <-tick.C:
		}
	}
}

// startFollowing reads the checkpoint's cursors and follows each stream
// from its own until stop.
func (r *EventRelay) startFollowing(ctx context.Context) (stop func(), err error) {
	cursors := map[string]string{}
	for _, s := range r.cfg.Streams {
		cp, err := r.c.Store().RelayCheckpoint(ctx, r.cfg.Checkpoint, s)
		if err != nil {
			return nil, err
		}
		cursors[s] = cp.Cursor
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, s := range r.cfg.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.follow(ctx, s, cursors[s])
		}()
	}
	return func() { cancel(); wg.Wait() }, nil
}

// leading says whether this relay may publish: always without an
// election, while it holds the lease with one.
func (r *EventRelay) leading() bool { return r.el == nil || r.el.IsLeader() }

// Stop stops following and waits for the streams (a publish in flight
// ends with ctx's end; what was acknowledged is checkpointed).
func (r *EventRelay) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel := r.cancel
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	done := make(chan struct{})
	go func() { cancel(); r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// follow publishes one stream from after, page by page, until ctx ends.
func (r *EventRelay) follow(ctx context.Context, stream, after string) {
	failures := 0
	wait := func() bool {
		t := time.NewTimer(backstop.ReadBackoff(failures))
		defer t.Stop()
		failures++
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	stale := false // another leader may have moved the checkpoint
	for {
		if !r.leading() {
			stale = true
			if !r.pause(ctx) {
				return
			}
			continue
		}
		if stale {
			cp, err := r.c.Store().RelayCheckpoint(ctx, r.cfg.Checkpoint, stream)
			if err != nil {
				if ctx.Err() != nil || !wait() {
					return
				}
				continue
			}
			after, stale = cp.Cursor, false
		}
		page, err := r.c.ReadEvents(ctx, backstop.ReadEventsParams{Stream: stream, After: after, Limit: r.cfg.Batch})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("relay: reading the event log failed; retrying", "checkpoint", r.cfg.Checkpoint, "stream", stream, "after", after, "error", err)
			if !backstop.ReadRetryable(ctx, err) {
				r.save(ctx, stream, after, 0, 0, err)
			}
			if !wait() {
				return
			}
			continue
		}
		next, published, dups, err := r.publish(ctx, stream, after, page)
		deposed := errors.Is(err, errNotLeading)
		if published > 0 || next != after || err != nil {
			if ctx.Err() != nil && err != nil || deposed {
				err = nil // stopped, not failed
			}
			r.save(ctx, stream, next, published, dups, err)
		}
		after = next
		if ctx.Err() != nil {
			return
		}
		if deposed {
			continue
		}
		if err != nil {
			if !wait() {
				return
			}
			continue
		}
		failures = 0
		if len(page.Events) == r.cfg.Batch {
			continue
		}
		if !r.pause(ctx) {
			return
		}
	}
}

// pause waits a poll interval; false when ctx ended.
func (r *EventRelay) pause(ctx context.Context) bool {
	t := time.NewTimer(r.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// publish publishes page's events in order and returns the cursor the
// checkpoint may move to: the page's end when every event was
// acknowledged, else the last acknowledged event's cursor (or after).
func (r *EventRelay) publish(ctx context.Context, stream, after string, page backstop.EventPage) (next string, published, dups int64, err error) {
	if bs, ok := r.cfg.Sink.(BatchSink); ok && len(page.Events) > 1 {
		return r.publishBatch(ctx, bs, stream, after, page)
	}
	next = after
	set := r.m.sets[stream]
	for _, e := range page.Events {
		if !r.leading() {
			return next, published, dups, errNotLeading
		}
		d, err := r.delivery(e)
		if err != nil {
			return next, published, dups, err
		}
		if err := r.cfg.Sink.Deliver(ctx, d); err != nil {
			if ctx.Err() == nil {
				r.m.failed.Add(ctx, 1, set)
				r.log.Warn("relay: publishing an event failed; retrying", "checkpoint", r.cfg.Checkpoint, "stream", stream,
					"event_id", e.ID, "sink", r.cfg.SinkName, "error", err)
			}
			return next, published, dups, err
		}
		published++
		r.m.published.Add(ctx, 1, set)
		if d.Duplicate {
			dups++
			r.m.duplicates.Add(ctx, 1, set)
		}
		next = e.Cursor
	}
	return page.Next, published, dups, nil
}

// publishBatch publishes page's events as one batch (BatchSink) and
// returns the cursor of the last event of the acknowledged prefix (the
// page's end when all were): the checkpoint never passes an event the
// broker did not acknowledge. A batch is published whole by the leader of
// when it began: a relay deposed meanwhile publishes at most one batch
// beside its successor, repeats the broker removes by event id.
func (r *EventRelay) publishBatch(ctx context.Context, bs BatchSink, stream, after string, page backstop.EventPage) (next string, published, dups int64, err error) {
	if !r.leading() {
		return after, 0, 0, errNotLeading
	}
	set := r.m.sets[stream]
	ds := make([]*Delivery, len(page.Events))
	for i, e := range page.Events {
		if ds[i], err = r.delivery(e); err != nil {
			return after, 0, 0, err
		}
	}
	// The acknowledged prefix: the checkpoint stops before the first event
	// the broker did not take (later ones that arrived are sent again).
	acked := len(ds)
	for i, e := range bs.DeliverBatch(ctx, ds) {
		if e != nil {
			acked, err = i, e
			break
		}
	}
	for _, d := range ds[:acked] {
		if d.Duplicate {
			dups++
		}
	}
	published = int64(acked)
	r.m.published.Add(ctx, published, set)
	r.m.duplicates.Add(ctx, dups, set)
	if err != nil {
		if ctx.Err() == nil {
			r.m.failed.Add(ctx, 1, set)
			r.log.Warn("relay: publishing an event failed; retrying", "checkpoint", r.cfg.Checkpoint, "stream", stream,
				"event_id", page.Events[min(acked, len(ds)-1)].ID, "sink", r.cfg.SinkName, "acknowledged", acked, "batch", len(ds), "error", err)
		}
		if acked == 0 {
			return after, 0, dups, err
		}
		return page.Events[acked-1].Cursor, published, dups, err
	}
	return page.Next, published, dups, nil
}

// errNotLeading ends a page when this relay lost its checkpoint's lease.
var errNotLeading = errors.New("relay: no longer the checkpoint's leader")

// save stores the checkpoint (outliving ctx's end: what was acknowledged
// before a stop is kept).
func (r *EventRelay) save(ctx context.Context, stream, cursor string, published, dups int64, failure error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	u := store.RelayCheckpointUpdate{Name: r.cfg.Checkpoint, Stream: stream, Sink: r.cfg.SinkName, Cursor: cursor,
		AddPublished: published, AddDuplicates: dups, Now: r.c.Engine().Now()}
	if failure != nil {
		u.Error = truncate(failure.Error(), 1000)
	}
	if err := r.c.Store().SaveRelayCheckpoint(ctx, u); err != nil {
		r.log.Warn("relay: saving the checkpoint failed", "checkpoint", r.cfg.Checkpoint, "stream", stream, "cursor", cursor, "error", err)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// EventHeaders name an event on the broker (beside Backstop-Message-Id,
// the event id, on every sink, and Nats-Msg-Id on JetStream).
const (
	EventIDHeader     = "Backstop-Event-Id"
	EventTypeHeader   = "Backstop-Event-Type"
	EventCursorHeader = "Backstop-Event-Cursor"
)

// delivery is an event's publication: the envelope (its body masked as in
// a task's history, backstop.MaskEventBody under the client's redaction
// keys) as payload, the topic from the template, the event's subject as
// key (so one task's events stay on one Kafka partition, in order).
func (r *EventRelay) delivery(e backstop.Event) (*Delivery, error) {
	e.Body = backstop.MaskEventBody(r.mask, e.Body)
	payload, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	topic := strings.ReplaceAll(r.cfg.Topic, "{type}", e.Type)
	cover := topic
	if prefix, ok := strings.CutSuffix(r.cfg.Topic, "{type}"); ok {
		cover = prefix + ">"
	}
	return &Delivery{ID: e.ID, Topic: topic, Key: e.Subject, Cover: cover, Payload: payload,
		Headers: map[string]string{"Backstop-Message-Id": e.ID, EventIDHeader: e.ID, EventTypeHeader: e.Type, EventCursorHeader: e.Cursor}}, nil
}
