package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/backstophq/backstop/internal/schedule"
	"github.com/backstophq/backstop/store"
)

// scheduleGauges are the periodic schedules' gauges, from the store (every
// process shows the same; alerts take the max by schedule):
// backstop_schedule_next_run_timestamp_seconds,
// backstop_schedule_last_enqueued_timestamp_seconds,
// backstop_schedule_period_seconds and backstop_schedule_paused, each
// {schedule}.
type scheduleGauges struct {
	next, last, period metric.Float64ObservableGauge
	paused             metric.Int64ObservableGauge
}

func newScheduleGauges(m metric.Meter) (*scheduleGauges, error) {
	var g scheduleGauges
	var err error
	if g.next, err = m.Float64ObservableGauge("backstop.schedule.next_run_timestamp", metric.WithUnit("s"),
		metric.WithDescription("A periodic schedule's next tick, in seconds since the epoch.")); err != nil {
		return nil, err
	}
	if g.last, err = m.Float64ObservableGauge("backstop.schedule.last_enqueued_timestamp", metric.WithUnit("s"),
		metric.WithDescription("The last tick that enqueued a task, in seconds since the epoch (absent before the first).")); err != nil {
		return nil, err
	}
	if g.period, err = m.Float64ObservableGauge("backstop.schedule.period", metric.WithUnit("s"),
		metric.WithDescription("A schedule's period: its interval, or the gap between its cron expression's next two ticks.")); err != nil {
		return nil, err
	}
	if g.paused, err = m.Int64ObservableGauge("backstop.schedule.paused",
		metric.WithDescription("1 while a schedule is paused, else 0.")); err != nil {
		return nil, err
	}
	return &g, nil
}

func (g *scheduleGauges) instruments() []metric.Observable {
	return []metric.Observable{g.next, g.last, g.period, g.paused}
}

func (g *scheduleGauges) observe(o metric.Observer, ss []store.ScheduleGauge) {
	for _, s := range ss {
		at := metric.WithAttributes(attribute.String("schedule", s.Name))
		o.ObserveFloat64(g.next, float64(s.NextRunAt.UnixMilli())/1000, at)
		if s.LastEnqueuedAt != nil {
			o.ObserveFloat64(g.last, float64(s.LastEnqueuedAt.UnixMilli())/1000, at)
		}
		o.ObserveFloat64(g.period, s.Period.Seconds(), at)
		paused := int64(0)
		if s.Paused {
			paused = 1
		}
		o.ObserveInt64(g.paused, paused, at)
	}
}

// WithSchedules adds the periodic schedules list returns (the store's
// ListSchedules) to a store's gauge query: the schedule gauges.
func WithSchedules(r store.GaugeReader, list func(context.Context) ([]store.Schedule, error)) store.GaugeReader {
	return scheduleReader{r, list}
}

type scheduleReader struct {
	store.GaugeReader
	list func(context.Context) ([]store.Schedule, error)
}

func (s scheduleReader) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	snap, err := s.GaugeReader.Gauges(ctx)
	if err != nil {
		return nil, err
	}
	ss, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	for _, sc := range ss {
		g := store.ScheduleGauge{Name: sc.Name, NextRunAt: sc.NextRunAt, LastEnqueuedAt: sc.LastEnqueuedAt, Paused: sc.Paused}
		if sch, err := schedule.Parse(schedule.Spec{Every: sc.Every, Cron: sc.Cron, TZ: sc.TZ}); err == nil {
			if after := sch.Next(sc.NextRunAt); !after.IsZero() {
				g.Period = after.Sub(sc.NextRunAt)
			}
		}
		snap.Schedules = append(snap.Schedules, g)
	}
	return snap, nil
}
