// Package testclock is the tests' clock: it stands still until the test
// moves it, so a backoff, a lease or an interval passes when the test says
// so, never because a slow machine took its time. It satisfies the
// engine's Clock (and backstop.Clock) and gives a func() time.Time where a
// component takes one.
package testclock

import (
	"sync"
	"time"
)

// Clock is a stopped clock; Advance moves it. Safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New is a clock stopped at the current wall time (UTC, whole
// microseconds, as the stores keep time).
func New() *Clock { return At(time.Now()) }

// At is a clock stopped at t (UTC, whole microseconds).
func At(t time.Time) *Clock { return &Clock{t: t.UTC().Truncate(time.Microsecond)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
