package maintenance

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/backstophq/backstop/internal/engine"
)

// OrderingDrains runs the ordering admission and the due drains of every
// configured queue (Engine.OrderQueue), so a buffered task whose gap timed
// out is released even when no worker of its queue claims.
type OrderingDrains struct {
	base
	e      *engine.Engine
	queues []string
}

// NewOrderingDrains makes the "ordering_drains" service over the engine's
// configured queues.
func NewOrderingDrains(e *engine.Engine, every time.Duration) *OrderingDrains {
	return &OrderingDrains{base: base{"ordering_drains", every}, e: e, queues: slices.Sorted(maps.Keys(e.Config().Queues))}
}

// RunOnce drains each queue once; a queue's failure does not stop the
// others.
func (o *OrderingDrains) RunOnce(ctx context.Context) error {
	var errs []error
	for _, q := range o.queues {
		if err := o.e.OrderQueue(ctx, q); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
