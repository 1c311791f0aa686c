package engine

import (
	"context"
	"time"
)

// Clock tells the engine the time. Tests and simulations inject their own so
// nothing has to sleep through a backoff.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// RealClock is the wall clock, truncated to microseconds like the stores.
var RealClock Clock = realClock{}

// Sleeper is a Clock that also waits: a simulated clock makes the engine's
// waits (the worker's backoffs after a failed claim or settle) follow its
// time instead of the wall's.
type Sleeper interface {
	Sleep(ctx context.Context, d time.Duration)
}

// Sleep waits d, or until ctx ends, by the configured clock when it is a
// Sleeper, else by the wall clock.
func (e *Engine) Sleep(ctx context.Context, d time.Duration) {
	if s, ok := e.cfg.Clock.(Sleeper); ok {
		s.Sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
