package backstop

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// QueueState is a paused queue: when and by whom it was paused.
type QueueState = store.QueueState

// PauseQueue stops every worker, in-process or remote, from claiming the
// queue's tasks (the store's claim skips it); running tasks finish as
// usual and enqueues still land. Pausing a paused queue changes nothing and
// returns the first pause; changed says whether this call paused it.
func (c *Client) PauseQueue(ctx context.Context, queue, actor string) (st QueueState, changed bool, err error) {
	if err := validName(queue); err != nil {
		return st, false, invalid("queue", "%v", err)
	}
	if err := checkText("actor", actor); err != nil {
		return st, false, err
	}
	actor = c.actor(actor)
	st, changed, err = c.store.PauseQueue(ctx, queue, actor, c.now())
	if err == nil && changed {
		c.cfg.Logger.Info("queue paused", slog.String("queue", queue), slog.String("actor", actor))
	}
	return st, changed, err
}

// ResumeQueue lets workers claim the queue again (and wakes them);
// changed is false when it was not paused.
func (c *Client) ResumeQueue(ctx context.Context, queue, actor string) (changed bool, err error) {
	if err := validName(queue); err != nil {
		return false, invalid("queue", "%v", err)
	}
	changed, err = c.store.ResumeQueue(ctx, queue)
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
	add := func(name string, counts map[State]int, oldest *time.Time) {
		v := QueueSummary{Name: name, Counts: make(map[State]int, len(bt.States)), OldestPendingAt: oldest}
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
// console's overview. The store counts them per minute on its side, reading
// only the window's rows through partial indexes; the answer is the
// minutes, zeros filled in.
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
	counts, err := c.store.Activity(ctx, time.Unix(first*60, 0))
	if err != nil {
		return nil, err
	}
	out := make([]ActivityMinute, 0, minutes)
	for m := first; m <= last; m++ {
		out = append(out, ActivityMinute{Minute: time.Unix(m*60, 0).UTC(), MinuteActivity: counts[m]})
	}
	return out, nil
}
