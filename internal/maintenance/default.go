package maintenance

import (
	"time"

	"github.com/backstophq/backstop/internal/engine"
)

// Leaderships the default services run under: one elected leader each
// among every process on the store.
const (
	// MaintenanceLeadership runs promotion, lease expiry, deadlines, lost
	// workers, ordering drains, the workflow runs' wake-ups, the periodic
	// schedules, the activity rollup and the kept task counts.
	MaintenanceLeadership = "maintenance"
	// RetentionLeadership runs retention, only in processes whose database
	// role may delete.
	RetentionLeadership = "retention"
)

// Default registers the engine's maintenance on m: Services under
// MaintenanceLeadership every interval, retention under
// RetentionLeadership by the configured policy, and the sweep of this
// process's remote attempts' spans without an election.
func Default(m *Maintainer, e *engine.Engine, every time.Duration) {
	for _, s := range Services(e, every) {
		m.Register(MaintenanceLeadership, s)
	}
	m.Register(RetentionLeadership, RetentionOf(e))
	m.Register("", NewRemoteSpans(e, every))
}

// Services are the services of the maintenance leadership, in the order a
// round runs them.
func Services(e *engine.Engine, every time.Duration) []Service {
	return []Service{
		NewPromoter(e.Store(), e.Now, every),
		NewLeaseExpiry(e, every),
		NewDeadlines(e, every),
		NewLostWorkers(e, every),
		NewOrderingDrains(e, every),
		NewRunWakeups(e, every),
		NewSchedules(e, every),
		NewActivity(e.Store(), e.Now, every),
		NewTaskCounts(e, every),
	}
}

// RetentionOf is the retention service by the engine's configuration
// (Config.Retention, with closed dead letters kept for at least
// Config.PurgeFloor).
func RetentionOf(e *engine.Engine) *Retention {
	cfg := e.Config()
	if d := cfg.Retention.DeadLetters; d >= 0 && d < cfg.PurgeFloor {
		cfg.Logger.Warn("retention.dead_letters is below dlq.purge_floor: closed dead letters are kept for the floor instead",
			"retention", d.String(), "purge_floor", cfg.PurgeFloor.String())
	}
	return NewRetention(e.Store(), e.Now, cfg.Retention.Interval, PolicyOf(cfg), cfg.Logger)
}

// PolicyOf is the retention policy of cfg: closed dead letters are kept
// for at least the purge floor.
func PolicyOf(cfg *engine.Config) RetentionPolicy {
	r := cfg.Retention
	dl := r.DeadLetters
	if dl >= 0 && dl < cfg.PurgeFloor {
		dl = cfg.PurgeFloor
	}
	return RetentionPolicy{Succeeded: r.Succeeded, Canceled: r.Canceled, DeadLetters: dl, Events: r.Events, Runs: r.Runs}
}
