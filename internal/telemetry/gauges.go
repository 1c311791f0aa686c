package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/backstophq/backstop/store"
)

// GaugeInterval is how often the store-derived gauges are refreshed.
const GaugeInterval = 10 * time.Second

// StoreGauges exposes the store-derived gauges (store.GaugeReader): tasks
// by queue and state, dead letters by queue and status, the age of the
// oldest pending task and of the oldest lease per queue, the age of the
// oldest open dead letter and the open dead letters' payload bytes per
// queue, workers by state, and the dead-letter retention policy.
// The store is read by one query every interval, in the background; a
// scrape reads the cached snapshot (ages are computed at scrape time from
// the cached timestamps, so they keep growing between refreshes).
type StoreGauges struct {
	mu   sync.Mutex
	snap *store.GaugeSnapshot
	now  func() time.Time

	reg    metric.Registration
	cancel context.CancelFunc
	done   chan struct{}
}

// StartStoreGauges registers the gauges on mp and refreshes them from r
// every interval (GaugeInterval when 0) until Stop. now tells the time
// (nil: time.Now). WorkersByState comes from r (the binary adds the
// worker registry's counts to the store's query).
func StartStoreGauges(ctx context.Context, mp metric.MeterProvider, r store.GaugeReader, interval time.Duration,
	now func() time.Time, log *slog.Logger) (*StoreGauges, error) {
	if interval <= 0 {
		interval = GaugeInterval
	}
	if now == nil {
		now = time.Now
	}
	g := &StoreGauges{now: now, done: make(chan struct{})}
	m := mp.Meter("github.com/backstophq/backstop/store")
	tasks, err := m.Int64ObservableGauge("backstop.tasks", metric.WithUnit("{task}"),
		metric.WithDescription("Tasks by queue and state (store-derived, refreshed every few seconds)."))
	if err != nil {
		return nil, err
	}
	dlq, err := m.Int64ObservableGauge("backstop.dlq.size", metric.WithUnit("{task}"),
		metric.WithDescription("Dead letters by queue and DLQ status (open, replayed, discarded, resolved)."))
	if err != nil {
		return nil, err
	}
	pending, err := m.Float64ObservableGauge("backstop.queue.oldest_pending_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest pending task per queue: now minus its run_at."))
	if err != nil {
		return nil, err
	}
	lease, err := m.Float64ObservableGauge("backstop.lease.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest running attempt per queue: now minus when its lease began."))
	if err != nil {
		return nil, err
	}
	workers, err := m.Int64ObservableGauge("backstop.workers", metric.WithUnit("{worker}"),
		metric.WithDescription("Workers by state (from the worker registry)."))
	if err != nil {
		return nil, err
	}
	heartbeat, err := m.Float64ObservableGauge("backstop.worker.heartbeat_age", metric.WithUnit("s"),
		metric.WithDescription("Per worker that should be heartbeating (active, stopping, or stale for under an hour): now minus its last heartbeat."))
	if err != nil {
		return nil, err
	}
	openAge, err := m.Float64ObservableGauge("backstop.dlq.oldest_open_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest open dead letter per queue: now minus when it last died."))
	if err != nil {
		return nil, err
	}
	openBytes, err := m.Int64ObservableGauge("backstop.dlq.open_payload", metric.WithUnit("By"),
		metric.WithDescription("Payload bytes of the open dead letters per queue (inline and spilled)."))
	if err != nil {
		return nil, err
	}
	retention, err := m.Float64ObservableGauge("backstop.dlq.retention", metric.WithUnit("s"),
		metric.WithDescription("How old a closed dead letter gets before retention deletes it (this process's retention.dead_letters; absent when kept forever)."))
	if err != nil {
		return nil, err
	}
	floor, err := m.Float64ObservableGauge("backstop.dlq.purge_floor", metric.WithUnit("s"),
		metric.WithDescription("The age below which no purge should delete a dead letter (dlq.purge_floor); alerts compare the retention to it."))
	if err != nil {
		return nil, err
	}
	sched, err := newScheduleGauges(m)
	if err != nil {
		return nil, err
	}
	relay, err := newRelayGauges(m) // relay.go
	if err != nil {
		return nil, err
	}
	limitWaiting, err := m.Int64ObservableGauge("backstop.limit.waiting", metric.WithUnit("{task}"),
		metric.WithDescription("Pending tasks a concurrency limit holds back (its budget for their value is full), per limit."))
	if err != nil {
		return nil, err
	}
	g.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		g.mu.Lock()
		snap := g.snap
		g.mu.Unlock()
		if snap == nil {
			return nil
		}
		t := g.now()
		for q, states := range snap.Tasks {
			for st, n := range states {
				o.ObserveInt64(tasks, int64(n), metric.WithAttributes(attribute.String("queue", q), attribute.String("state", string(st))))
			}
		}
		for q, statuses := range snap.DeadLetters {
			for st, n := range statuses {
				o.ObserveInt64(dlq, int64(n), metric.WithAttributes(attribute.String("queue", q), attribute.String("status", string(st))))
			}
		}
		for q, at := range snap.OldestPending {
			o.ObserveFloat64(pending, max(t.Sub(at), 0).Seconds(), metric.WithAttributes(attribute.String("queue", q)))
		}
		for q, at := range snap.OldestLease {
			o.ObserveFloat64(lease, max(t.Sub(at), 0).Seconds(), metric.WithAttributes(attribute.String("queue", q)))
		}
		for st, n := range snap.WorkersByState {
			o.ObserveInt64(workers, int64(n), metric.WithAttributes(attribute.String("state", st)))
		}
		for _, w := range snap.WorkerLastSeen {
			o.ObserveFloat64(heartbeat, max(t.Sub(w.LastSeen), 0).Seconds(),
				metric.WithAttributes(attribute.String("worker_id", w.ID), attribute.String("host", w.Host)))
		}
		for q, at := range snap.OldestOpenDeadLetter {
			o.ObserveFloat64(openAge, max(t.Sub(at), 0).Seconds(), metric.WithAttributes(attribute.String("queue", q)))
		}
		for q, n := range snap.OpenDeadLetterBytes {
			o.ObserveInt64(openBytes, n, metric.WithAttributes(attribute.String("queue", q)))
		}
		for l, n := range snap.LimitWaiting {
			o.ObserveInt64(limitWaiting, int64(n), metric.WithAttributes(attribute.String("limit", l)))
		}
		if p := snap.DLQPolicy; p != nil {
			if p.Retention >= 0 {
				o.ObserveFloat64(retention, p.Retention.Seconds())
			}
			o.ObserveFloat64(floor, p.PurgeFloor.Seconds())
		}
		sched.observe(o, snap.Schedules)
		relay.observe(o, snap, t)
		return nil
	}, append(append([]metric.Observable{tasks, dlq, pending, lease, workers, heartbeat, openAge, openBytes, retention, floor, limitWaiting},
		sched.instruments()...), relay.instruments()...)...)
	if err != nil {
		return nil, err
	}
	ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))
	refresh := func() {
		qctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		snap, err := r.Gauges(qctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("refreshing the store gauges", "error", err)
			}
			return
		}
		g.mu.Lock()
		g.snap = snap
		g.mu.Unlock()
	}
	refresh()
	go func() {
		defer close(g.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				refresh()
			}
		}
	}()
	return g, nil
}

// Snapshot is the cached snapshot (nil before the first read succeeded).
func (g *StoreGauges) Snapshot() *store.GaugeSnapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.snap
}

// Stop ends the refreshes and unregisters the gauges.
func (g *StoreGauges) Stop() {
	g.cancel()
	<-g.done
	_ = g.reg.Unregister()
}

// WithDLQPolicy adds the process's dead-letter retention policy to a
// store's gauge query: backstop_dlq_retention_seconds and
// backstop_dlq_purge_floor_seconds (configuration, not a read).
func WithDLQPolicy(r store.GaugeReader, p store.DLQGaugePolicy) store.GaugeReader {
	return dlqPolicyGauges{r, p}
}

type dlqPolicyGauges struct {
	store.GaugeReader
	p store.DLQGaugePolicy
}

func (d dlqPolicyGauges) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	snap, err := d.GaugeReader.Gauges(ctx)
	if err != nil {
		return nil, err
	}
	p := d.p
	snap.DLQPolicy = &p
	return snap, nil
}

// WithWorkers adds the worker registry's counts by state (the library's
// Client.WorkerCounts) to a store's gauge query: backstop_workers.
func WithWorkers[S ~string](r store.GaugeReader, counts func(context.Context) (map[S]int, error)) store.GaugeReader {
	return workerGauges[S]{r, counts}
}

// WithWorkerHeartbeats adds, per worker list returns (the library's
// Client.HeartbeatingWorkers), its last heartbeat to a store's gauge
// query: backstop_worker_heartbeat_age_seconds{worker_id, host}.
func WithWorkerHeartbeats(r store.GaugeReader, list func(context.Context) ([]store.WorkerInfo, error)) store.GaugeReader {
	return heartbeatGauges{r, list}
}

type heartbeatGauges struct {
	store.GaugeReader
	list func(context.Context) ([]store.WorkerInfo, error)
}

func (h heartbeatGauges) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	snap, err := h.GaugeReader.Gauges(ctx)
	if err != nil {
		return nil, err
	}
	ws, err := h.list(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		snap.WorkerLastSeen = append(snap.WorkerLastSeen, store.WorkerSeen{ID: w.ID, Host: w.Host, LastSeen: w.LastSeen})
	}
	return snap, nil
}

type workerGauges[S ~string] struct {
	store.GaugeReader
	counts func(context.Context) (map[S]int, error)
}

func (w workerGauges[S]) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	snap, err := w.GaugeReader.Gauges(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := w.counts(ctx)
	if err != nil {
		return nil, err
	}
	for st, n := range counts {
		snap.WorkersByState[string(st)] = n
	}
	return snap, nil
}
