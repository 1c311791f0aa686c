package backstop

import (
	"context"
	"log/slog"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// FairQueue makes claims in Queue rotate across the values of the By
// attribute, weighted round robin within a priority (docs/fairness.md).
type FairQueue = engine.FairQueue

// ValidateFair checks a fair queue as SetFair does; a *ValidationError
// names the bad field.
func ValidateFair(f FairQueue) error { return engine.ValidateFair(f) }

// SetFair makes the queue fair (or replaces its attribute and weights);
// it binds this client's claims at once and other processes' within a
// second. The rotation starts afresh. It writes queue.fair_set to the
// audit stream with actor (empty: "library") and the context's reason
// (WithReason).
func (c *Client) SetFair(ctx context.Context, f FairQueue, actor string) (FairQueue, error) {
	if err := engine.ValidateFair(f); err != nil {
		return FairQueue{}, err
	}
	if err := engine.CheckText("actor", actor); err != nil {
		return FairQueue{}, err
	}
	f.CreatedAt = c.now()
	actor = c.actor(actor)
	extra := map[string]any{"by": f.By}
	if len(f.Weights) > 0 {
		extra["weights"] = f.Weights
	}
	ev := c.auditEvent(ctx, store.EventFairSet, f.Queue, actor, extra)
	if err := c.store.SetFair(ctx, f, ev); err != nil {
		return FairQueue{}, err
	}
	c.e.FairChanged()
	c.cfg.Logger.Info("queue fair", slog.String("queue", f.Queue), slog.String("by", f.By), slog.Any("weights", f.Weights),
		slog.String("actor", actor))
	return f, nil
}

// RemoveFair turns the queue's fairness off; removed is false when it was
// not on. It writes queue.fair_removed to the audit stream (as SetFair)
// when it was on.
func (c *Client) RemoveFair(ctx context.Context, queue, actor string) (removed bool, err error) {
	if err := engine.ValidName(queue); err != nil {
		return false, invalid("queue", "%v", err)
	}
	if err := engine.CheckText("actor", actor); err != nil {
		return false, err
	}
	actor = c.actor(actor)
	removed, err = c.store.RemoveFair(ctx, queue, c.auditEvent(ctx, store.EventFairRemoved, queue, actor, nil))
	if err == nil && removed {
		c.e.FairChanged()
		c.cfg.Logger.Info("queue fairness off", slog.String("queue", queue), slog.String("actor", actor))
	}
	return removed, err
}

// FairQueues lists the fair queues by name.
func (c *Client) FairQueues(ctx context.Context) ([]FairQueue, error) {
	return c.store.ListFair(ctx)
}

// FairValue is how many tasks of one value of a fair queue's attribute
// are pending, and the value's weight.
type FairValue = store.FairValue

// FairQueueStatus is a fair queue with its waiting tasks by value: the
// busiest store.MaxFairValues values, most pending first.
type FairQueueStatus struct {
	FairQueue
	Values []FairValue `json:"values"`
}

// FairQueueStatuses lists the fair queues by name, each with its pending
// tasks by value of its attribute.
func (c *Client) FairQueueStatuses(ctx context.Context) ([]FairQueueStatus, error) {
	fs, err := c.store.ListFair(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]FairQueueStatus, len(fs))
	for i, f := range fs {
		vs, err := c.store.FairValues(ctx, f)
		if err != nil {
			return nil, err
		}
		out[i] = FairQueueStatus{FairQueue: f, Values: vs}
	}
	return out, nil
}
