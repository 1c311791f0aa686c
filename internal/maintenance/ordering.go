package maintenance

import (
	"context"
	"errors"
	"time"
)

// OrderingDrains runs ordering admission and the due drains of every
// ordered queue (docs/ordering.md), so that a key's buffered tasks are
// released when their drain is due even while no worker claims from the
// queue.
type OrderingDrains struct {
	base
	queues []string
	drain  func(ctx context.Context, queue string) error
}

// NewOrderingDrains makes the "ordering_drains" service over queues;
// drain is the root package's Client.OrderQueue.
func NewOrderingDrains(queues []string, drain func(ctx context.Context, queue string) error, every time.Duration) *OrderingDrains {
	return &OrderingDrains{base: base{"ordering_drains", every}, queues: queues, drain: drain}
}

// RunOnce drains every queue, joining their errors.
func (o *OrderingDrains) RunOnce(ctx context.Context) error {
	var errs []error
	for _, q := range o.queues {
		if err := o.drain(ctx, q); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
