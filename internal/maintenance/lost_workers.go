package maintenance

import (
	"context"
	"time"
)

// LostWorkers writes worker.heartbeat_lost, once, for each registered
// worker that went stale. The marking (and its log line) is the root
// package's (workers.go); this service runs it under the leadership.
type LostWorkers struct {
	base
	mark func(ctx context.Context) error
}

// NewLostWorkers makes the "lost_workers" service.
func NewLostWorkers(mark func(ctx context.Context) error, every time.Duration) *LostWorkers {
	return &LostWorkers{base: base{"lost_workers", every}, mark: mark}
}

// RunOnce marks the workers that went stale.
func (l *LostWorkers) RunOnce(ctx context.Context) error { return l.mark(ctx) }
