package backstop

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// QueueState is a paused queue: when and by whom it was paused.
type QueueState = store.QueueState

// PauseQueue stops every worker, in-process or remote, from claiming the
// queue's tasks (the store's claim skips it); running tasks finish as
// usual and enqueues still land. Pausing a paused queue changes nothing and
// returns the first pause; changed says whether this call paused it.
func (c *Client) PauseQueue(ctx context.Context, queue, actor string) (st QueueState, changed bool, err error) {
	if err := engine.ValidName(queue); err != nil {
		return st, false, invalid("queue", "%v", err)
	}
	if err := engine.CheckText("actor", actor); err != nil {
		return st, false, err
	}
	actor = c.actor(actor)
	st, changed, err = c.store.PauseQueue(ctx, queue, actor, c.now(), c.auditEvent(ctx, store.EventQueuePaused, queue, actor, nil))
	if err == nil && changed {
		c.cfg.Logger.Info("queue paused", slog.String("queue", queue), slog.String("actor", actor))
	}
	return st, changed, err
}

// ResumeQueue lets workers claim the queue again (and wakes them);
// changed is false when it was not paused.
func (c *Client) ResumeQueue(ctx context.Context, queue, actor string) (changed bool, err error) {
	if err := engine.ValidName(queue); err != nil {
		return false, invalid("queue", "%v", err)
	}
	changed, err = c.store.ResumeQueue(ctx, queue, c.auditEvent(ctx, store.EventQueueResumed, queue, actor, nil))
	if err == nil && changed {
		c.cfg.Logger.Info("queue resumed", slog.String("queue", queue), slog.String("actor", c.actor(actor)))
	}
	return changed, err
}

// PausedQueues lists the paused queues by name.
func (c *Client) PausedQueues(ctx context.Context) ([]QueueState, error) {
	return c.store.PausedQueues(ctx)
}

// QueueSummary is one queue: its task counts by state (every state present,
// zero included) and whether it is paused.
type QueueSummary struct {
	Name   string        `json:"name"`
	Counts map[State]int `json:"counts"`
	Total  int           `json:"total"`
	// Paused: workers do not claim from the queue (since PausedAt, by
	// PausedBy).
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	PausedBy string     `json:"paused_by,omitempty"`
	// OldestPendingAt is the earliest run_at of the queue's pending tasks:
	// how long the oldest claimable task has waited (absent: none pending).
	OldestPendingAt *time.Time `json:"oldest_pending_at,omitempty"`
	// CountsCapped lists the states whose counts (and so Total) are lower
	// bounds: the store counted them among the newest of their tasks only
	// (PostgreSQL: the newest 10,000 finished tasks of all queues, for
	// succeeded and canceled), and there were more. Absent: exact.
	CountsCapped []State `json:"counts_capped,omitempty"`
}

// Queues lists every queue that holds tasks or is paused, by name.
func (c *Client) Queues(ctx context.Context) ([]QueueSummary, error) {
	qs, err := c.store.CountByQueue(ctx)
	if err != nil {
		return nil, err
	}
	paused, err := c.store.PausedQueues(ctx)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]QueueState, len(paused))
	for _, p := range paused {
		byName[p.Name] = p
	}
	out := make([]QueueSummary, 0, len(qs)+len(paused))
	var capped []State
	if len(qs) > 0 {
		capped = qs[0].Capped // the same for every queue
	}
	add := func(name string, counts map[State]int, oldest *time.Time) {
		v := QueueSummary{Name: name, Counts: make(map[State]int, len(bt.States)), OldestPendingAt: oldest, CountsCapped: capped}
		for _, st := range bt.States {
			v.Counts[st] = counts[st]
			v.Total += counts[st]
		}
		if p, ok := byName[name]; ok {
			at := p.PausedAt
			v.Paused, v.PausedAt, v.PausedBy = true, &at, p.PausedBy
			delete(byName, name)
		}
		out = append(out, v)
	}
	for _, q := range qs {
		add(q.Queue, q.Counts, q.OldestPending)
	}
	for _, p := range paused { // paused queues without tasks
		if _, ok := byName[p.Name]; ok {
			add(p.Name, nil, nil)
		}
	}
	slices.SortFunc(out, func(a, b QueueSummary) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ActivityMinute is one minute of Client.Activity.
type ActivityMinute struct {
	Minute time.Time `json:"minute"`
	store.MinuteActivity
}

// MaxActivityMinutes bounds Activity's window.
const MaxActivityMinutes = 24 * 60

// Activity answers, for each of the last minutes minutes (the current one
// last; default 60, at most MaxActivityMinutes), how many tasks succeeded,
// attempts failed and tasks died: the throughput and failure rate of the
// console's overview. The store counts them per minute on its side,
// reading only the rows of the minutes asked for through partial indexes.
// A minute that ended more than activitySettle ago no longer changes (its
// rows were written with times in it), so the client keeps its counts:
// once the window was read, a call reads only the minutes since the last
// one (the current minute and those that closed since), whatever the
// traffic of the hour.
func (c *Client) Activity(ctx context.Context, minutes int) ([]ActivityMinute, error) {
	if minutes < 0 || minutes > MaxActivityMinutes {
		return nil, invalid("minutes", "must be between 1 and %d", MaxActivityMinutes)
	}
	if minutes == 0 {
		minutes = 60
	}
	now := c.now().UTC()
	last := now.Unix() / 60
	first := last - int64(minutes) + 1
	// closed: the last minute whose counts can be kept.
	closed := now.Add(-activitySettle).Unix()/60 - 1
	counts := c.activity.read(first, closed)
	from := first
	for from <= closed {
		if _, ok := counts[from]; !ok {
			break
		}
		from++
	}
	fresh, err := c.store.Activity(ctx, time.Unix(from*60, 0), time.Unix((last+1)*60, 0))
	if err != nil {
		return nil, err
	}
	c.activity.keep(fresh, from, closed, first)
	out := make([]ActivityMinute, 0, minutes)
	for m := first; m <= last; m++ {
		a, ok := counts[m]
		if !ok {
			a = fresh[m]
		}
		out = append(out, ActivityMinute{Minute: time.Unix(m*60, 0).UTC(), MinuteActivity: a})
	}
	return out, nil
}

// activitySettle is how long after its end a minute's counts are taken as
// final (commits in flight, clocks a little apart).
const activitySettle = 10 * time.Second

// activityCache holds the counts of closed minutes (those without any
// row are held as zeros), at most MaxActivityMinutes of them.
type activityCache struct {
	mu sync.Mutex
	m  map[int64]store.MinuteActivity
}

// read copies the cached minutes in [first, closed].
func (a *activityCache) read(first, closed int64) map[int64]store.MinuteActivity {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[int64]store.MinuteActivity{}
	for m := first; m <= closed; m++ {
		if v, ok := a.m[m]; ok {
			out[m] = v
		}
	}
	return out
}

// keep caches the closed minutes [from, closed] of fresh and forgets
// minutes older than the longest window before first.
func (a *activityCache) keep(fresh map[int64]store.MinuteActivity, from, closed, first int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[int64]store.MinuteActivity{}
	}
	for m := from; m <= closed; m++ {
		a.m[m] = fresh[m]
	}
	for m := range a.m {
		if m < first-MaxActivityMinutes || m > closed {
			delete(a.m, m)
		}
	}
}

// OrderQueue runs ordering admission and due drains for one queue now (the
// worker does it before each claim, maintenance for due drains). When the
// ordering state cannot be read or written, the queue's ordered tasks are
// handed to normal processing (counted as fallback).
func (c *Client) OrderQueue(ctx context.Context, queue string) error {
	return c.e.OrderQueue(ctx, queue)
}

// OrderingStats returns this client's ordering counters, all queues.
func (c *Client) OrderingStats() *OrderingStats { return c.e.OrderingStats() }

// QueueOrderingStats returns the ordering counters of one queue (nil when
// the queue does not have ordering enabled in this client's Config).
func (c *Client) QueueOrderingStats(queue string) *OrderingStats {
	return c.e.QueueOrderingStats(queue)
}

// OrderingKeys lists the ordering keys of a queue (those with a state and
// those with tasks waiting) in key order, those after after, at most limit
// (default 100, at most 1000); an unknown queue has none. Page on with the
// last key as after.
func (c *Client) OrderingKeys(ctx context.Context, queue, after string, limit int) ([]OrderingKey, error) {
	return c.e.OrderingKeys(ctx, queue, after, limit)
}

// RotateLeaseKey replaces the key that signs remote workers' lease tokens
// with a fresh random one; the key it replaces still verifies the tokens it
// signed for grace (at most MaxLeaseKeyGrace), so the leases held now run
// on; after that a worker still holding such a token gets
// lease_not_current, and its attempt is retried when the lease expires.
// Every process sharing the database picks up the new key within
// LeaseKeyRefresh (this one at once). It answers the time until which the
// old key stays good. Rotate when a token or the key may have leaked.
func (c *Client) RotateLeaseKey(ctx context.Context, grace time.Duration) (time.Time, error) {
	return c.e.RotateLeaseKey(ctx, grace)
}

// Stats is a snapshot of the store for operators (`backstop stats`): rows
// per queue and state, dead letters by status and reason, the oldest
// waiting and running work, table sizes and the leadership leases.
type Stats struct {
	*store.Stats
	// OldestPendingAge: how long the oldest claimable task has waited
	// since its run_at (0: none pending).
	OldestPendingAge Duration `json:"oldest_pending_age"`
	// OldestRunningAge: how long the oldest running attempt has held its
	// lease (0: none running).
	OldestRunningAge Duration `json:"oldest_running_age"`
	// At is when the snapshot was taken (the client's clock).
	At time.Time `json:"at"`
}

// Stats reads a snapshot of the store.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	st, err := c.store.Stats(ctx)
	if err != nil {
		return nil, err
	}
	now := c.now()
	out := &Stats{Stats: st, At: now}
	if st.OldestPendingRunAt != nil {
		out.OldestPendingAge = Duration(max(now.Sub(*st.OldestPendingRunAt), 0))
	}
	if st.OldestRunningSince != nil {
		out.OldestRunningAge = Duration(max(now.Sub(*st.OldestRunningSince), 0))
	}
	return out, nil
}

// View names an operator view; see the constants.
type View = store.View

// The operator views (`backstop tasks list --view V`).
const (
	// ViewPendingRetries: scheduled tasks that already failed (attempt > 0).
	ViewPendingRetries = store.ViewPendingRetries
	// ViewRetryExhausted: dead letters with reason attempts_exhausted.
	ViewRetryExhausted = store.ViewRetryExhausted
	// ViewRecentFailures: tasks with a failed attempt in the last 24 hours,
	// most recent failure first.
	ViewRecentFailures = store.ViewRecentFailures
)

// ListView lists at most limit tasks (default 100, at most 10,000) of an
// operator view.
func (c *Client) ListView(ctx context.Context, v View, limit int) ([]*Task, error) {
	if limit < 0 || limit > 10000 {
		return nil, invalid("limit", "must be between 1 and 10000")
	}
	known := false
	for _, k := range store.Views {
		known = known || k == v
	}
	if !known {
		return nil, invalid("view", "unknown view %q (want pending-retries, retry-exhausted or recent-failures)", v)
	}
	return c.store.View(ctx, v, c.now(), limit)
}
