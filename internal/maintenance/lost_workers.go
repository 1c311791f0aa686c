package maintenance

import (
	"context"
	"time"

	"github.com/backstophq/backstop/internal/engine"
)

// LostWorkers writes worker.heartbeat_lost, once, for each registered
// worker that went stale (not seen for workers.stale_after).
type LostWorkers struct {
	base
	e *engine.Engine
}

// NewLostWorkers makes the "lost_workers" service.
func NewLostWorkers(e *engine.Engine, every time.Duration) *LostWorkers {
	return &LostWorkers{base: base{"lost_workers", every}, e: e}
}

// RunOnce marks the workers that went stale since the last round.
func (l *LostWorkers) RunOnce(ctx context.Context) error {
	cfg := l.e.Config()
	ids, err := l.e.Store().MarkLostWorkers(ctx, l.e.Now(), cfg.WorkerStaleAfter)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		cfg.Logger.Warn("workers stopped heartbeating", "workers", ids, "stale_after", cfg.WorkerStaleAfter.String())
	}
	return nil
}
