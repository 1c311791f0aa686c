package engine

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	// RunLate: a task whose sequence is not newer than its key's last one
	// (it was made earlier but committed later: two producers racing on a
	// key) or repeats one runs in its key's turn instead of being canceled
	// as stale, so per key the tasks run one at a time in commit order and
	// none is dropped. The sink queues' setting: an outbox message is
	// never dropped. Default false (stale tasks are canceled).
	RunLate bool
	// EnabledFor, when set, rolls ordering out gradually: only the tasks
	// it selects are ordered; the queue's other tasks run unordered, as on
	// a queue without ordering (their key and sequence dropped, the
	// attribute ordering_rollout=out on the task), and both are counted.
	EnabledFor *OrderingRollout
}

// OrderingRollout selects the tasks of a queue that are ordered while
// ordering is rolled out: those whose Attribute has one of Values (the
// organisations that turned it on), and those whose ordering key falls in
// Percent of all keys by a stable hash (the same key is always in or
// out). Either or both.
type OrderingRollout struct {
	Attribute string
	Values    []string
	Percent   float64 // 0 to 100
}

// OrderingRolloutAttribute marks a task of a queue rolling ordering out
// that its rollout left unordered (value "out").
const OrderingRolloutAttribute = "ordering_rollout"

func (r *OrderingRollout) validate(queue string) error {
	if r.Percent < 0 || r.Percent > 100 {
		return fmt.Errorf("queue %q: ordering: enabled_for.percent must be between 0 and 100", queue)
	}
	if (r.Attribute == "") != (len(r.Values) == 0) {
		return fmt.Errorf("queue %q: ordering: enabled_for.attribute and enabled_for.values go together", queue)
	}
	if r.Attribute == "" && r.Percent == 0 {
		return fmt.Errorf("queue %q: ordering: enabled_for selects nothing (give attribute and values, or percent)", queue)
	}
	return nil
}

// Selects reports whether the rollout orders an enqueue with key and attrs.
func (r *OrderingRollout) Selects(key string, attrs map[string]string) bool {
	if r.Attribute != "" {
		if v, ok := attrs[r.Attribute]; ok && slices.Contains(r.Values, v) {
			return true
		}
	}
	if r.Percent > 0 {
		h := fnv.New64a()
		h.Write([]byte(key))
		return float64(h.Sum64()%10000) < r.Percent*100
	}
	return false
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
	if o.RunLate && o.Step != 0 {
		return fmt.Errorf("queue %q: ordering: late tasks run only with step 0 (any newer sequence next: no gaps to wait for)", queue)
	}
	if o.EnabledFor != nil {
		if err := o.EnabledFor.validate(queue); err != nil {
			return err
		}
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
		RunLate: o.RunLate, Decide: ordering.Decide} // internal/ordering: the engine's policy
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
// queues (OrderingStats) or one (QueueOrderingStats).
// Prometheus names are backstop_ordering_<name>_total with the names of
// Counters, one series per ordered queue (label queue).
type OrderingStats struct {
	Buffered, Released, DrainScheduled, DrainRescheduled, Cleared atomic.Int64
	Timeouts, CircuitBreaker, Stale, GapsReported, Fallback       atomic.Int64
	FirstHeld                                                     atomic.Int64 // of Buffered: by FirstHold
	Admitted                                                      atomic.Int64 // tasks made pending (their key's turn)
	// While ordering is rolled out (EnabledFor): the enqueued tasks the
	// rollout ordered, and those it left unordered.
	RolloutOrdered, RolloutUnordered atomic.Int64
	GapsClosed                       atomic.Int64 // replays that succeeded (ordering.gap_closed)
}

// Counters returns the counters by their metric name.
func (s *OrderingStats) Counters() map[string]int64 {
	return map[string]int64{
		"buffered": s.Buffered.Load(), "released": s.Released.Load(),
		"drain_scheduled": s.DrainScheduled.Load(), "drain_rescheduled": s.DrainRescheduled.Load(),
		"cleared": s.Cleared.Load(), "timeouts": s.Timeouts.Load(), "circuit_breaker": s.CircuitBreaker.Load(),
		"stale": s.Stale.Load(), "gaps_reported": s.GapsReported.Load(), "fallback": s.Fallback.Load(),
		"first_held": s.FirstHeld.Load(), "admitted": s.Admitted.Load(),
		"gaps_closed":     s.GapsClosed.Load(),
		"rollout_ordered": s.RolloutOrdered.Load(), "rollout_unordered": s.RolloutUnordered.Load(),
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
func (e *Engine) OrderingStats() *OrderingStats { return e.ordStats() }

func (e *Engine) ordStats() *OrderingStats { return &e.ordering }

// QueueOrderingStats returns the ordering counters of one queue (nil when
// the queue does not have ordering enabled in this client's Config).
func (e *Engine) QueueOrderingStats(queue string) *OrderingStats { return e.orderingByQueue[queue] }

// newQueueOrderingStats makes the per-queue counters of every ordered
// queue of cfg (fixed at New: the map is only read afterwards).
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
func (e *Engine) countOrdering(queue string, d store.OrderingDelta, fallback int64) {
	for _, st := range []*OrderingStats{e.ordStats(), e.orderingByQueue[queue]} {
		if st != nil {
			st.add(d)
			st.Fallback.Add(fallback)
		}
	}
}

// A queue's ordering is one rule for every path (a worker on the database,
// a server, a remote worker through it): a queue declared in Config.Queues
// is ordered as its Ordering says (a producer is refused keys on a queue
// declared without it); a queue not declared is ordered with the default
// settings (OrderingConfig{Enabled: true}) as soon as it has ordered tasks,
// as a producer that does not know the queue accepts keys for it. An
// undeclared queue is looked at (one small read) at most once a second
// while it has none, so plain queues pay next to nothing.

// implicitOrdering remembers, per undeclared queue, whether it has ordered
// tasks and when to look again.
type implicitOrdering struct {
	mu     sync.Mutex
	queues map[string]implicitQueue
	seen   atomic.Bool // some look found ordered tasks (never reset)
}

type implicitQueue struct {
	active  bool      // the last look found ordering keys
	next    time.Time // no look before this (wall clock: a throttle, not a policy)
	looking bool      // a periodic look is under way
}

// lookNow makes the next look at an undeclared queue happen at once.
func (o *implicitOrdering) lookNow(queue string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if q, ok := o.queues[queue]; ok {
		q.next = time.Time{}
		o.queues[queue] = q
	}
}

// implicitRecheck is how long an undeclared queue without ordered tasks
// goes unexamined.
const implicitRecheck = time.Second

// queueOrdering returns a queue's ordering settings and whether the queue
// is declared in the configuration.
func (e *Engine) queueOrdering(queue string) (OrderingConfig, bool) {
	if q, ok := e.cfg.Queues[queue]; ok {
		return q.Ordering, true
	}
	// A sink's queue (sink.<name>) holds outbox messages: never dropped.
	return OrderingConfig{Enabled: true, RunLate: strings.HasPrefix(queue, "sink.")}, false
}

// Ordered reports whether queue is ordered now: declared with ordering, or
// undeclared and found with ordered tasks at the last look.
func (e *Engine) Ordered(queue string) bool {
	o, declared := e.queueOrdering(queue)
	if declared {
		return o.Enabled
	}
	e.implicit.mu.Lock()
	defer e.implicit.mu.Unlock()
	return e.implicit.queues[queue].active
}

// lookForOrdering tells whether an undeclared queue has ordered tasks (a
// key with a state or waiting tasks), looking again at most once per
// implicitRecheck (the look lists a page of keys: not a read for every
// claim; a queue that stopped having ordered tasks pays one admission
// look per claim for at most that long). The first look, and one asked
// for by lookNow, are waited for; a periodic look runs in the background
// while claims go on with the last answer.
func (e *Engine) lookForOrdering(ctx context.Context, queue string) (bool, error) {
	o := &e.implicit
	o.mu.Lock()
	q, known := o.queues[queue]
	switch {
	case time.Now().Before(q.next):
		o.mu.Unlock()
		return q.active, nil
	case known && !q.next.IsZero():
		if !q.looking {
			q.looking = true
			o.queues[queue] = q
			go func() {
				lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				if _, err := e.look(lctx, queue, q.next); err != nil {
					e.cfg.Logger.Error("ordering failed", "queue", queue, "error", err)
				}
			}()
		}
		o.mu.Unlock()
		return q.active, nil
	}
	o.mu.Unlock()
	return e.look(ctx, queue, q.next)
}

// look reads whether queue has ordering keys and keeps the answer, unless
// lookNow asked for a new look since due (the next look's time when it
// began).
func (e *Engine) look(ctx context.Context, queue string, due time.Time) (bool, error) {
	ks, err := e.store.OrderingKeys(ctx, queue, "", 1)
	o := &e.implicit
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.queues == nil {
		o.queues = map[string]implicitQueue{}
	}
	q := o.queues[queue]
	q.looking = false
	if err != nil {
		o.queues[queue] = q
		return false, err
	}
	if due.IsZero() || !q.next.IsZero() { // a lookNow during a periodic look: the next claim looks again
		q.active, q.next = len(ks) > 0, time.Now().Add(implicitRecheck)
	}
	if len(ks) > 0 {
		o.seen.Store(true)
	}
	o.queues[queue] = q
	return len(ks) > 0, nil
}

// OrderQueue runs ordering admission and due drains for one queue now (the
// worker does it before each claim, maintenance for due drains). When the
// ordering state cannot be read or written, the queue's ordered tasks are
// handed to normal processing (counted as fallback).
func (e *Engine) OrderQueue(ctx context.Context, queue string) error {
	o, declared := e.queueOrdering(queue)
	if declared && !o.Enabled {
		return nil
	}
	if !declared {
		if active, err := e.lookForOrdering(ctx, queue); err != nil || !active {
			return err
		}
	}
	d, err := e.store.Order(ctx, queue, o.settings(), e.Now())
	if err == nil {
		e.countOrdering(queue, d, 0)
		return nil
	}
	e.cfg.Logger.Error("ordering state unusable: falling back to unordered handling", "queue", queue, "error", err)
	n, ferr := e.store.OrderingFallback(ctx, queue, e.Now())
	e.countOrdering(queue, store.OrderingDelta{}, int64(n))
	if ferr != nil {
		return fmt.Errorf("ordering: %w; fallback: %w", err, ferr)
	}
	return nil
}

// mayEndOrdered reports whether a settle batch may end the busy task of
// an ordering key: it ends a task (succeeded, dead, canceled) of a queue
// this engine orders (declared, or undeclared with ordered tasks found),
// or of a queue it was not told. Other batches settle in one statement
// as before.
func (e *Engine) mayEndOrdered(ss []store.Settlement) bool {
	if len(e.orderingByQueue) == 0 && !e.implicit.seen.Load() {
		return false
	}
	return slices.ContainsFunc(ss, func(s store.Settlement) bool {
		return store.EndsTask(s) && (s.Queue == "" || e.Ordered(s.Queue))
	})
}

// settleOrdered settles a batch and, in its transaction, judges the keys
// whose busy task it ended (store.Ordering.SettleOrdered): a key's next
// task is pending, and its queue woken, when the batch commits, instead of
// waiting for the next claim's admission. Keys whose task ended another
// way are left to OrderQueue's sweep, which also admits new tasks and runs
// due drains. When the ordering state cannot be written the batch settles
// alone, and the sweep judges its keys.
func (e *Engine) settleOrdered(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	oks, deltas, err := e.store.SettleOrdered(ctx, ss, e.orderingFor, e.Now())
	if err != nil {
		e.cfg.Logger.Warn("settling with ordering admission failed: settling alone", "error", err, "tasks", len(ss))
		return e.store.Settle(ctx, ss)
	}
	for q, d := range deltas {
		e.countOrdering(q, d, 0)
	}
	return oks, nil
}

// orderingFor is a queue's ordering settings for the store (ok false: the
// queue is declared without ordering).
func (e *Engine) orderingFor(queue string) (store.OrderingSettings, bool) {
	o, declared := e.queueOrdering(queue)
	if declared && !o.Enabled {
		return store.OrderingSettings{}, false
	}
	return o.settings(), true
}

// WithOrdering fills the ordering key, sequence and gaps of tasks of any
// queue (a producer need not know which queues are ordered).
func (e *Engine) WithOrdering(ctx context.Context, tasks []*Task) error {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	info, err := e.store.OrderingInfo(ctx, ids)
	if err != nil {
		return err
	}
	for _, t := range tasks {
		if in, ok := info[t.ID]; ok {
			t.OrderingKey, t.Sequence, t.Gaps = in.Key, in.Sequence, in.Gaps
			t.OrderingWait = e.orderingWait(t, in)
		}
	}
	return nil
}

// orderingWait says why a buffered task of an ordering key waits, from its
// ordering status and its key's state ("" for a task that does not wait).
func (e *Engine) orderingWait(t *Task, in store.OrderingInfo) string {
	if t.State != bt.StateBuffered {
		return ""
	}
	key := strconv.Quote(in.Key)
	turn := "its key's next admission"
	if in.BusyTaskID != "" {
		turn = fmt.Sprintf("task %s (sequence %d) of key %s to end", in.BusyTaskID, in.BusySequence, key)
	}
	switch in.Status {
	case store.OrdHeld:
		return fmt.Sprintf("held: waiting for ordering admission of key %s, which a worker of queue %q runs before each claim",
			key, t.Queue)
	case store.OrdReady:
		return "released: waiting for " + turn
	case store.OrdReplay:
		return "replay: waiting for " + turn
	case store.OrdGap:
		var why string
		o, _ := e.queueOrdering(t.Queue)
		switch {
		case in.LastSequence == nil:
			why = fmt.Sprintf("buffered: key %s's first tasks are held until its drain", key)
		case o.Step > 0 && *in.LastSequence+o.Step < in.Sequence:
			why = fmt.Sprintf("buffered: waiting for sequence %d of key %s (last handled %d)", *in.LastSequence+o.Step, key, *in.LastSequence)
		default:
			why = fmt.Sprintf("buffered: key %s has a gap after sequence %d; its drain releases the buffer in order", key, *in.LastSequence)
		}
		if in.DrainDueAt != nil {
			why += ", next drain at " + in.DrainDueAt.UTC().Format(time.RFC3339)
		}
		return why
	}
	return ""
}

// attachOrdering fills the ordering key, sequence and gaps of claimed tasks
// of an ordered queue.
func (e *Engine) attachOrdering(ctx context.Context, queue string, tasks []*Task) {
	if !e.Ordered(queue) || len(tasks) == 0 {
		return
	}
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	info, err := e.store.OrderingInfo(ctx, ids)
	if err != nil {
		e.cfg.Logger.Warn("ordering info unavailable", "queue", queue, "error", err)
		return
	}
	for _, t := range tasks {
		if in, ok := info[t.ID]; ok {
			t.OrderingKey, t.Sequence, t.Gaps = in.Key, in.Sequence, in.Gaps
		}
	}
}

// orderingPrepare validates the ordering fields of an enqueue and returns
// the state the task starts in; unordered: the queue's rollout of ordering
// leaves this task out (it runs unordered, its key and sequence dropped).
func (e *Engine) orderingPrepare(p *EnqueueParams, queue string, state bt.State) (_ bt.State, unordered bool, err error) {
	if p.OrderingKey == "" {
		if p.Sequence != 0 {
			return state, false, Invalid("sequence", "needs an ordering key")
		}
		return state, false, nil
	}
	if p.Sequence < 0 {
		return state, false, Invalid("sequence", "must not be negative")
	}
	if len(p.OrderingKey) > 256 {
		return state, false, Invalid("ordering_key", "is longer than 256 bytes")
	}
	// A queue this client knows without ordering refuses keys; one it does
	// not know is trusted to be ordered by the workers that run it.
	if q, known := e.cfg.Queues[queue]; known && !q.Ordering.Enabled {
		return state, false, Invalid("ordering_key", "queue %q does not have ordering enabled", queue)
	}
	if p.IdempotencyKey != "" || p.MergeKey != "" {
		return state, false, Invalid("ordering_key", "cannot be combined with an idempotency or merge key")
	}
	o, declared := e.queueOrdering(queue)
	if !declared {
		e.implicit.lookNow(queue) // this client's workers admit it at their next claim
	}
	if r := o.EnabledFor; declared && r != nil && !r.Selects(p.OrderingKey, p.Attributes) {
		return state, true, nil
	}
	return bt.StateBuffered, false, nil
}

// OrderingKey is one ordering key's state and waiting tasks, as
// OrderingKeys lists them.
type OrderingKey = store.OrderingKeyInfo

// OrderingKeys lists the ordering keys of a queue (those with a state and
// those with tasks waiting) in key order, those after after, at most limit
// (default 100, at most 1000); an unknown queue has none. Page on with the
// last key as after.
func (e *Engine) OrderingKeys(ctx context.Context, queue, after string, limit int) ([]OrderingKey, error) {
	if limit == 0 {
		limit = 100
	}
	if limit < 1 || limit > store.MaxOrderingKeys {
		return nil, Invalid("limit", "must be between 1 and %d", store.MaxOrderingKeys)
	}
	if err := ValidName(queue); err != nil {
		return nil, Invalid("queue", "%v", err)
	}
	return e.store.OrderingKeys(ctx, queue, after, limit)
}
