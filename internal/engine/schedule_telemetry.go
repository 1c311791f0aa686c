package engine

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScheduleTicks counts a schedule's ticks by outcome (enqueued, skipped):
// backstop_schedule_ticks_total{schedule, outcome}, recorded by the
// scheduler once its round committed.
func (t *Telemetry) ScheduleTicks(ctx context.Context, schedule, outcome string, n int) {
	if n <= 0 || t.scheduleTicks == nil {
		return
	}
	t.scheduleTicks.Add(ctx, int64(n), metric.WithAttributes(attribute.String("schedule", schedule), attribute.String("outcome", outcome)))
}

func newScheduleTicks(m metric.Meter) (metric.Int64Counter, error) {
	return m.Int64Counter("backstop.schedule.ticks", metric.WithUnit("{tick}"),
		metric.WithDescription("Periodic schedules' ticks, by schedule and outcome (enqueued, skipped)."))
}
