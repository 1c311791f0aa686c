package engine

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

// CountCorrections counts the tasks by which a reconciliation found the
// kept counts wrong (backstop_task_count_corrections_total): zero unless
// a write of tasks bypassed the keeping.
func (t *Telemetry) CountCorrections(ctx context.Context, n int) {
	if n <= 0 || t.countCorrections == nil {
		return
	}
	t.countCorrections.Add(ctx, int64(n))
}

func newCountCorrections(m metric.Meter) (metric.Int64Counter, error) {
	return m.Int64Counter("backstop.task_count.corrections", metric.WithUnit("{task}"),
		metric.WithDescription("Tasks by which the reconciliation of the kept counts by queue and state corrected them (zero when they were right)."))
}
