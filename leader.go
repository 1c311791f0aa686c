package backstop

import (
	"context"
	"time"
)

// MaintenanceLeadership names the lease in backstop_leaders that the
// maintenance leader holds: among all workers on one store (one SQLite
// file, or one Postgres shared by many hosts) only its holder runs Maintain
// and Retain.
const MaintenanceLeadership = "maintenance"

// IsLeader reports whether this worker holds the maintenance leadership
// now: it renewed the lease less than LeaderTTL ago.
func (w *Worker) IsLeader() bool {
	until := w.leaderUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

// maintenanceLoop runs the election and, while this worker leads, the
// maintenance rounds and retention. A non-leader tries to take the lease at
// every tick, so a resigned or expired lease is taken within a tick; the
// leader renews every LeaderTTL/3.
func (w *Worker) maintenanceLoop(ctx context.Context) {
	defer w.bgWG.Done()
	period := min(w.cfg.MaintenanceInterval, w.cfg.LeaderTTL/3)
	tick := time.NewTicker(period)
	defer tick.Stop()
	var lastRenew, lastMaintain, lastRetain time.Time
	for {
		now := time.Now()
		if !w.IsLeader() || now.Sub(lastRenew) >= w.cfg.LeaderTTL/3 {
			if w.elect(ctx, now) {
				lastRenew = now
			}
		}
		if w.IsLeader() {
			if time.Since(lastMaintain) >= w.cfg.MaintenanceInterval {
				lastMaintain = time.Now()
				if err := Maintain(ctx, w.c); err != nil && ctx.Err() == nil {
					w.log.Error("maintenance failed", "error", err)
				}
			}
			if !w.noRetention && time.Since(lastRetain) >= w.c.cfg.Retention.Interval {
				lastRetain = time.Now()
				w.retain(ctx)
			}
		}
		select {
		case <-ctx.Done():
			w.resign()
			return
		case <-tick.C:
		}
	}
}

// elect takes or renews the lease and logs changes of leadership. started
// is when the attempt began: the lease is trusted until started+TTL.
func (w *Worker) elect(ctx context.Context, started time.Time) bool {
	was := w.IsLeader()
	won, err := w.c.store.TryLead(ctx, MaintenanceLeadership, w.cfg.ID, w.c.now(), w.cfg.LeaderTTL)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			w.log.Error("maintenance election failed", "error", err)
		}
		if was && !w.IsLeader() {
			w.log.Warn("maintenance leadership lost: the lease could not be renewed in time")
		}
		return false
	case won:
		w.leaderUntil.Store(started.Add(w.cfg.LeaderTTL).UnixNano())
		if !was {
			w.log.Info("maintenance leadership taken", "leader_ttl", w.cfg.LeaderTTL.String())
		}
		return true
	default:
		w.leaderUntil.Store(0)
		if was {
			w.log.Warn("maintenance leadership lost to another worker")
		}
		return false
	}
}

// resign gives the lease up on Stop so another worker takes over at once.
func (w *Worker) resign() {
	if !w.IsLeader() {
		return
	}
	w.leaderUntil.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.store.ResignLead(ctx, MaintenanceLeadership, w.cfg.ID); err != nil {
		w.log.Warn("resigning maintenance leadership failed; another worker takes over when the lease expires", "error", err)
		return
	}
	w.log.Info("maintenance leadership resigned")
}
