package maintenance

import (
	"context"
	"time"

	"github.com/backstophq/backstop/internal/engine"
)

// RunWakeups plans again the workflow runs whose wake-up came
// (Engine.WakeRuns): a for_each step's budget ran out while its items
// waited for a slot and nothing of the run settled since, so the items
// not started fail by the budget at its deadline, not at the run's next
// settlement.
type RunWakeups struct {
	base
	e *engine.Engine
}

// NewRunWakeups makes the "run_wakeups" service.
func NewRunWakeups(e *engine.Engine, every time.Duration) *RunWakeups {
	return &RunWakeups{base: base{"run_wakeups", every}, e: e}
}

// RunOnce wakes the due runs, a batch at a time, until none is due.
func (r *RunWakeups) RunOnce(ctx context.Context) error {
	for {
		n, err := r.e.WakeRuns(ctx, Batch)
		if err != nil || n < Batch {
			return err
		}
	}
}
