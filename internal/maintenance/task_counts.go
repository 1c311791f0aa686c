package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// CountsReconcileEvery is how often the task_counts service compares the
// kept counts with a count of the tasks (one grouped scan of the table).
const CountsReconcileEvery = 10 * time.Minute

// TaskCounts keeps the counts of tasks by queue and state that
// GET /v1/queues and /v1/counts read (store.CountKeeper): each round folds
// the deltas the writes appended since the last one into the kept counts,
// so a read sums a few rows; CountsReconcileEvery after its first round,
// and then every CountsReconcileEvery, it also counts the tasks and
// corrects the kept counts by any difference, so that a bug cannot leave
// them wrong for good: a correction is logged as a warning and counted
// (backstop_task_count_corrections_total). The count reads every task
// row, the finished history included (on PostgreSQL a sequential scan of
// the table), so it is not run when a process starts leading: a worker
// or server started again and again would read the whole history each
// time.
type TaskCounts struct {
	base
	store   store.CountKeeper
	now     func() time.Time
	log     *slog.Logger
	corrBy  func(ctx context.Context, n int)
	checked time.Time // the last reconciliation, or the first round
}

// NewTaskCounts makes the "task_counts" service.
func NewTaskCounts(e *engine.Engine, every time.Duration) *TaskCounts {
	return &TaskCounts{base: base{"task_counts", every}, store: e.Store(), now: e.Now,
		log: e.Config().Logger, corrBy: e.Telemetry.CountCorrections}
}

// RunOnce reconciles when one is due, then folds.
func (c *TaskCounts) RunOnce(ctx context.Context) error {
	now := c.now()
	if c.checked.IsZero() {
		c.checked = now
	}
	if now.Sub(c.checked) >= CountsReconcileEvery {
		d, err := c.store.ReconcileCounts(ctx)
		if err != nil {
			return err
		}
		c.checked = now
		if d.Groups > 0 {
			c.log.Warn("the kept task counts were wrong; corrected from a count of the tasks",
				"groups", d.Groups, "tasks", d.Tasks)
			c.corrBy(ctx, d.Tasks)
		}
	}
	_, err := c.store.FoldCounts(ctx)
	return err
}
