package engine

import "time"

// Clock tells the engine the time. Tests and simulations inject their own so
// nothing has to sleep through a backoff.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// RealClock is the wall clock, truncated to microseconds like the stores.
var RealClock Clock = realClock{}
