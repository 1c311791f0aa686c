package backstop

import (
	"context"
	"log/slog"

	"github.com/backstophq/backstop/internal/engine"
)

// FairQueue makes claims in Queue rotate across the values of the By
// attribute, weighted round robin within a priority (docs/fairness.md).
type FairQueue = engine.FairQueue

// ValidateFair checks a fair queue as SetFair does; a *ValidationError
// names the bad field.
func ValidateFair(f FairQueue) error { return engine.ValidateFair(f) }

// SetFair makes the queue fair (or replaces its attribute and weights);
// it binds this client's claims at once and other processes' within a
// second. The rotation starts afresh.
func (c *Client) SetFair(ctx context.Context, f FairQueue) (FairQueue, error) {
	if err := engine.ValidateFair(f); err != nil {
		return FairQueue{}, err
	}
	f.CreatedAt = c.now()
	if err := c.store.SetFair(ctx, f); err != nil {
		return FairQueue{}, err
	}
	c.e.FairChanged()
	c.cfg.Logger.Info("queue fair", slog.String("queue", f.Queue), slog.String("by", f.By), slog.Any("weights", f.Weights))
	return f, nil
}

// RemoveFair turns the queue's fairness off; removed is false when it was
// not on.
func (c *Client) RemoveFair(ctx context.Context, queue string) (removed bool, err error) {
	if err := engine.ValidName(queue); err != nil {
		return false, invalid("queue", "%v", err)
	}
	removed, err = c.store.RemoveFair(ctx, queue)
	if err == nil && removed {
		c.e.FairChanged()
		c.cfg.Logger.Info("queue fairness off", slog.String("queue", queue))
	}
	return removed, err
}

// FairQueues lists the fair queues by name.
func (c *Client) FairQueues(ctx context.Context) ([]FairQueue, error) {
	return c.store.ListFair(ctx)
}
