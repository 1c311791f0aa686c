package backstop

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/ordering"
	"github.com/backstophq/backstop/store"
)

// Gap is a run of sequences of an ordering key that never arrived.
type Gap = bt.Gap

// OrderingConfig turns on ordered processing for a queue (docs/ordering.md):
// per ordering key, tasks run one at a time in sequence order; stale ones
// are dropped; a gap buffers later tasks until it fills, the drain's
// backoff schedule is used up, or the buffer reaches CircuitBreaker.
type OrderingConfig struct {
	Enabled bool
	// Step is the expected difference between consecutive sequences; 0:
	// none, any newer sequence is the next (strictly increasing).
	Step int64
	// Backoff is the drain's schedule; when it is used up (the last value
	// does not repeat) the drain gives up and releases everything, reporting
	// the gaps. Default 10s,20s,30s,60s,60s.
	Backoff []time.Duration
	// CircuitBreaker: a key's buffer of this size is released at once, gaps
	// reported. Default 10.
	CircuitBreaker int
	// KeyTTL is how long a key's state lives without activity. Default 60m.
	KeyTTL time.Duration
	// FirstHold: a key without state (new, or forgotten after KeyTTL)
	// buffers its first task this long before the drain releases it, so
	// an older task of the key that it overtook and that arrives within the
	// hold runs first instead of being dropped as stale. Sequences before
	// the first task are not gaps. It delays every key's first task by the
	// hold. Default 0: a fresh key's first task is admitted at once.
	FirstHold time.Duration
}

// DefaultOrderingBackoff is the drain schedule when none is configured.
var DefaultOrderingBackoff = []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 60 * time.Second, 60 * time.Second}

func (o OrderingConfig) validate(queue string) error {
	if !o.Enabled {
		return nil
	}
	if o.Step < 0 {
		return fmt.Errorf("queue %q: ordering: step must not be negative", queue)
	}
	for i, d := range o.Backoff {
		if d <= 0 {
			return fmt.Errorf("queue %q: ordering: backoff[%d] must be positive", queue, i)
		}
	}
	if o.CircuitBreaker < 0 {
		return fmt.Errorf("queue %q: ordering: circuit breaker must not be negative", queue)
	}
	if o.KeyTTL < 0 {
		return fmt.Errorf("queue %q: ordering: key TTL must not be negative", queue)
	}
	if o.FirstHold < 0 {
		return fmt.Errorf("queue %q: ordering: first hold must not be negative", queue)
	}
	return nil
}

// settings are the store's view, defaults applied.
func (o OrderingConfig) settings() store.OrderingSettings {
	s := store.OrderingSettings{Step: o.Step, Backoff: o.Backoff, CircuitBreaker: o.CircuitBreaker, KeyTTL: o.KeyTTL, FirstHold: o.FirstHold,
		Decide: ordering.Decide} // internal/ordering: the engine's policy
	if len(s.Backoff) == 0 {
		s.Backoff = DefaultOrderingBackoff
	}
	if s.CircuitBreaker == 0 {
		s.CircuitBreaker = 10
	}
	if s.KeyTTL == 0 {
		s.KeyTTL = time.Hour
	}
	return s
}

// OrderingStats counts what ordered processing did in this client: all
// queues (Client.OrderingStats) or one (Client.QueueOrderingStats).
// Prometheus names are backstop_ordering_<name>_total with the names of
// Counters, one series per ordered queue (label queue).
type OrderingStats struct {
	Buffered, Released, DrainScheduled, DrainRescheduled, Cleared atomic.Int64
	Timeouts, CircuitBreaker, Stale, GapsReported, Fallback       atomic.Int64
	FirstHeld                                                     atomic.Int64 // of Buffered: by FirstHold
	Admitted                                                      atomic.Int64 // tasks made pending (their key's turn)
	GapsClosed                                                    atomic.Int64 // replays that succeeded (ordering.gap_closed)
}

// Counters returns the counters by their metric name.
func (s *OrderingStats) Counters() map[string]int64 {
	return map[string]int64{
		"buffered": s.Buffered.Load(), "released": s.Released.Load(),
		"drain_scheduled": s.DrainScheduled.Load(), "drain_rescheduled": s.DrainRescheduled.Load(),
		"cleared": s.Cleared.Load(), "timeouts": s.Timeouts.Load(), "circuit_breaker": s.CircuitBreaker.Load(),
		"stale": s.Stale.Load(), "gaps_reported": s.GapsReported.Load(), "fallback": s.Fallback.Load(),
		"first_held": s.FirstHeld.Load(), "admitted": s.Admitted.Load(),
		"gaps_closed": s.GapsClosed.Load(),
	}
}

func (s *OrderingStats) add(d store.OrderingDelta) {
	s.Buffered.Add(d.Buffered)
	s.Released.Add(d.Released)
	s.DrainScheduled.Add(d.DrainScheduled)
	s.DrainRescheduled.Add(d.DrainRescheduled)
	s.Cleared.Add(d.Cleared)
	s.Timeouts.Add(d.Timeout)
	s.CircuitBreaker.Add(d.CircuitBreaker)
	s.Stale.Add(d.Stale)
	s.GapsReported.Add(d.GapsReported)
	s.FirstHeld.Add(d.FirstHeld)
	s.Admitted.Add(d.Admitted)
	s.GapsClosed.Add(d.GapsClosed)
}

// OrderingStats returns this client's ordering counters, all queues.
func (c *Client) OrderingStats() *OrderingStats { return c.ordStats() }

func (c *Client) ordStats() *OrderingStats { return &c.ordering }

// QueueOrderingStats returns the ordering counters of one queue (nil when
// the queue does not have ordering enabled in this client's Config).
func (c *Client) QueueOrderingStats(queue string) *OrderingStats { return c.orderingByQueue[queue] }

// newQueueOrderingStats makes the per-queue counters of every ordered
// queue of cfg (fixed at NewClient: the map is only read afterwards).
func newQueueOrderingStats(cfg *Config) map[string]*OrderingStats {
	m := map[string]*OrderingStats{}
	for name, q := range cfg.Queues {
		if q.Ordering.Enabled {
			m[name] = &OrderingStats{}
		}
	}
	return m
}

// countOrdering adds a queue's ordering delta to the queue's and the
// client's counters.
func (c *Client) countOrdering(queue string, d store.OrderingDelta, fallback int64) {
	for _, st := range []*OrderingStats{c.ordStats(), c.orderingByQueue[queue]} {
		if st != nil {
			st.add(d)
			st.Fallback.Add(fallback)
		}
	}
}

// ordered reports whether queue has ordering enabled.
func (c *Client) ordered(queue string) bool {
	q, ok := c.cfg.Queues[queue]
	return ok && q.Ordering.Enabled
}

// OrderQueue runs ordering admission and due drains for one queue now (the
// worker does it before each claim, maintenance for due drains). When the
// ordering state cannot be read or written, the queue's ordered tasks are
// handed to normal processing (counted as fallback).
func (c *Client) OrderQueue(ctx context.Context, queue string) error {
	if !c.ordered(queue) {
		return nil
	}
	d, err := c.store.Order(ctx, queue, c.cfg.Queues[queue].Ordering.settings(), c.now())
	if err == nil {
		c.countOrdering(queue, d, 0)
		return nil
	}
	c.cfg.Logger.Error("ordering state unusable: falling back to unordered handling", "queue", queue, "error", err)
	n, ferr := c.store.OrderingFallback(ctx, queue, c.now())
	c.countOrdering(queue, store.OrderingDelta{}, int64(n))
	if ferr != nil {
		return fmt.Errorf("ordering: %w; fallback: %w", err, ferr)
	}
	return nil
}

// withOrdering fills the ordering key, sequence and gaps of tasks of any
// queue (a producer need not know which queues are ordered).
func (c *Client) withOrdering(ctx context.Context, tasks []*Task) error {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	info, err := c.store.OrderingInfo(ctx, ids)
	if err != nil {
		return err
	}
	for _, t := range tasks {
		if in, ok := info[t.ID]; ok {
			t.OrderingKey, t.Sequence, t.Gaps = in.Key, in.Sequence, in.Gaps
		}
	}
	return nil
}

// attachOrdering fills the ordering key, sequence and gaps of claimed tasks
// of an ordered queue.
func (c *Client) attachOrdering(ctx context.Context, queue string, tasks []*Task) {
	if !c.ordered(queue) || len(tasks) == 0 {
		return
	}
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	info, err := c.store.OrderingInfo(ctx, ids)
	if err != nil {
		c.cfg.Logger.Warn("ordering info unavailable", "queue", queue, "error", err)
		return
	}
	for _, t := range tasks {
		if in, ok := info[t.ID]; ok {
			t.OrderingKey, t.Sequence, t.Gaps = in.Key, in.Sequence, in.Gaps
		}
	}
}

// Gaps returns the gaps reported with the task a handler runs: sequences of
// its ordering key that never arrived before the drain gave up, so the
// handler can backfill what it would otherwise record as missed.
func Gaps(ctx context.Context) []Gap {
	if t, ok := TaskFromContext(ctx); ok {
		return t.Gaps
	}
	return nil
}

// orderingPrepare validates the ordering fields of an enqueue and returns
// the state the task starts in.
func (c *Client) orderingPrepare(p *EnqueueParams, queue string, state bt.State) (bt.State, error) {
	if p.OrderingKey == "" {
		if p.Sequence != 0 {
			return state, invalid("sequence", "needs an ordering key")
		}
		return state, nil
	}
	if p.Sequence < 0 {
		return state, invalid("sequence", "must not be negative")
	}
	if len(p.OrderingKey) > 256 {
		return state, invalid("ordering_key", "is longer than 256 bytes")
	}
	// A queue this client knows without ordering refuses keys; one it does
	// not know is trusted to be ordered by the workers that run it.
	if q, known := c.cfg.Queues[queue]; known && !q.Ordering.Enabled {
		return state, invalid("ordering_key", "queue %q does not have ordering enabled", queue)
	}
	if p.IdempotencyKey != "" || p.MergeKey != "" {
		return state, invalid("ordering_key", "cannot be combined with an idempotency or merge key")
	}
	return bt.StateBuffered, nil
}

// OrderingKey is one ordering key's state and waiting tasks, as
// Client.OrderingKeys lists them.
type OrderingKey = store.OrderingKeyInfo

// OrderingKeys lists the ordering keys of a queue (those with a state and
// those with tasks waiting) in key order, those after after, at most limit
// (default 100, at most 1000); an unknown queue has none. Page on with the
// last key as after.
func (c *Client) OrderingKeys(ctx context.Context, queue, after string, limit int) ([]OrderingKey, error) {
	if limit == 0 {
		limit = 100
	}
	if limit < 1 || limit > store.MaxOrderingKeys {
		return nil, invalid("limit", "must be between 1 and %d", store.MaxOrderingKeys)
	}
	if err := validName(queue); err != nil {
		return nil, invalid("queue", "%v", err)
	}
	return c.store.OrderingKeys(ctx, queue, after, limit)
}
