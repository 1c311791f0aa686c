package store

import (
	"context"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// GaugeReader is a store's answer to the metrics' store-derived gauges, read by
// one bounded query (its rows are bounded by queues × states × DLQ
// statuses) on an interval, never per scrape.
type GaugeReader interface {
	Gauges(ctx context.Context) (*GaugeSnapshot, error)
}

// GaugeSnapshot is what the gauges show at one time.
type GaugeSnapshot struct {
	// Tasks counts tasks by queue and state.
	Tasks map[string]map[bt.State]int
	// Capped lists the states whose Tasks counts are lower bounds: counted
	// among the newest of their tasks only (PostgreSQL counts succeeded
	// and canceled tasks among the newest FinishedCounted finished ones,
	// as GET /v1/queues does); nil when every count is exact.
	Capped []bt.State
	// DeadLetters counts dead tasks by queue and DLQ status.
	DeadLetters map[string]map[bt.DLQStatus]int
	// OldestPending is, per queue with pending tasks, the smallest run_at
	// of a pending task.
	OldestPending map[string]time.Time
	// OldestLease is, per queue with running tasks, the earliest
	// attempted_at of a running task (when its current lease began).
	OldestLease map[string]time.Time
	// WorkersByState is filled from the worker registry
	// (Client.WorkerCounts), not by the store's task query.
	WorkersByState map[string]int
	// WorkerLastSeen is, per worker that should be heartbeating (filled
	// by the caller from the registry, like WorkersByState), when it was
	// last seen.
	WorkerLastSeen []WorkerSeen
	// OldestOpenDeadLetter is, per queue with open dead letters, the
	// earliest last_seen (when it last died) of an open dead letter.
	OldestOpenDeadLetter map[string]time.Time
	// OpenDeadLetterBytes is, per queue with open dead letters, the sum of
	// their payload sizes (inline and spilled).
	OpenDeadLetterBytes map[string]int64
	// DLQPolicy is the process's dead-letter retention policy (filled by
	// the caller from its configuration; nil: not exported).
	DLQPolicy *DLQGaugePolicy
	// Schedules are the periodic schedules (filled by the caller from
	// ListSchedules, like WorkersByState).
	Schedules []ScheduleGauge
	// LimitWaiting is, per limit (store/limits.go), how many pending tasks
	// its full budgets hold back (every limit, 0 included; filled by the
	// caller from the engine's limit statuses, read at the engine's clock,
	// like Schedules).
	LimitWaiting map[string]int
	// RelayCheckpoints are the event-log relay's checkpoints with their
	// lag (filled by the caller, like Schedules; store/relaycheckpoints.go).
	RelayCheckpoints []RelayCheckpointGauge
}

// RelayCheckpointGauge is what the relay gauges show of one checkpoint's
// stream: the events after its cursor (counted up to a bound) and the
// time of the oldest of them (nil: caught up).
type RelayCheckpointGauge struct {
	Name, Stream, Sink string
	EventsBehind       int64
	OldestEvent        *time.Time
}

// ScheduleGauge is what the schedule gauges show of one schedule: its next
// tick, the last tick that enqueued, its period (the interval, or the gap
// between a cron expression's next two ticks) and whether it is paused.
type ScheduleGauge struct {
	Name           string
	NextRunAt      time.Time
	LastEnqueuedAt *time.Time
	Period         time.Duration
	Paused         bool
}

// DLQGaugePolicy is what the policy gauges show: how old a closed dead
// letter gets before retention deletes it (negative: kept forever), and the
// floor no purge should go below.
type DLQGaugePolicy struct {
	Retention, PurgeFloor time.Duration
}

// WorkerSeen is one worker's last heartbeat, for the per-worker gauge.
type WorkerSeen struct {
	ID, Host string
	LastSeen time.Time
}

// NewGaugeSnapshot returns an empty snapshot.
func NewGaugeSnapshot() *GaugeSnapshot {
	return &GaugeSnapshot{Tasks: map[string]map[bt.State]int{}, DeadLetters: map[string]map[bt.DLQStatus]int{},
		OldestPending: map[string]time.Time{}, OldestLease: map[string]time.Time{}, WorkersByState: map[string]int{},
		OldestOpenDeadLetter: map[string]time.Time{}, OpenDeadLetterBytes: map[string]int64{}, LimitWaiting: map[string]int{}}
}

// AddOpenDeadLetters folds one row's open dead letters (the oldest one's
// last_seen, their payload bytes) into the snapshot; a nil oldest means the
// row held none.
func (g *GaugeSnapshot) AddOpenDeadLetters(queue string, oldest *time.Time, bytes int64) {
	if oldest == nil {
		return
	}
	if t, ok := g.OldestOpenDeadLetter[queue]; !ok || oldest.Before(t) {
		g.OldestOpenDeadLetter[queue] = oldest.UTC()
	}
	g.OpenDeadLetterBytes[queue] += bytes
}

// AddGaugeRow folds one row of a driver's gauge query (grouped by queue,
// state and DLQ status) into the snapshot.
func (g *GaugeSnapshot) AddGaugeRow(queue string, state bt.State, dlq bt.DLQStatus, n int, oldestPending, oldestLease *time.Time) {
	if g.Tasks[queue] == nil {
		g.Tasks[queue] = map[bt.State]int{}
	}
	g.Tasks[queue][state] += n
	if state == bt.StateDead {
		if g.DeadLetters[queue] == nil {
			g.DeadLetters[queue] = map[bt.DLQStatus]int{}
		}
		g.DeadLetters[queue][dlq] += n
	}
	if oldestPending != nil {
		if t, ok := g.OldestPending[queue]; !ok || oldestPending.Before(t) {
			g.OldestPending[queue] = oldestPending.UTC()
		}
	}
	if oldestLease != nil {
		if t, ok := g.OldestLease[queue]; !ok || oldestLease.Before(t) {
			g.OldestLease[queue] = oldestLease.UTC()
		}
	}
}
