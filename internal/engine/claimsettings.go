package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/store"
)

// claimFlags is what the claim path knows of the queues' settings: which
// have limits (the claim takes the limited path), which of those have rate
// limits (a short claim may wait for a token), and which are fair (the
// fair path), read together.
type claimFlags struct {
	read    time.Time
	unknown bool // the settings could not be read: every queue may be both
	limits  map[string]bool
	rates   map[string]bool
	fairs   map[string]bool
}

// limited tells whether queue has limits. When they could not be read it
// says yes (the limited claim reads them again, in its transaction, and
// claims as usual when there are none).
func (f *claimFlags) limited(queue string) bool { return f.unknown || f.limits[queue] }

// rated tells whether queue has a rate limit; unknown, yes (NextToken
// answers none when it has not).
func (f *claimFlags) rated(queue string) bool { return f.unknown || f.rates[queue] }

// fair tells whether queue is fair; unknown, yes (the fair claim reads it
// again, in its transaction, and claims as usual when it is not).
func (f *claimFlags) fair(queue string) bool { return f.unknown || f.fairs[queue] }

// claimSettings caches the claim flags, reread every LimitsRefresh (real
// time: a frozen test clock must not freeze it). A claim reads the current
// flags without a lock; when they are stale one reread runs in the
// background while claims go on with the stale ones (a claim never waits
// on it), and when there are none (the first claim, or a change through
// this engine) claims wait for the read.
type claimSettings struct {
	cur     atomic.Pointer[claimFlags]
	gen     atomic.Uint64 // bumped by a change: a read begun before it is not kept
	reading sync.Mutex
}

// settings returns the claim flags, rereading them when stale.
func (e *Engine) settings(ctx context.Context) *claimFlags {
	c := &e.claimSettings
	f := c.cur.Load()
	if f != nil && time.Since(f.read) < LimitsRefresh {
		return f
	}
	if f != nil {
		if c.reading.TryLock() { // else another reread is under way
			go func() {
				defer c.reading.Unlock()
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				e.readSettings(rctx)
			}()
		}
		return f
	}
	c.reading.Lock()
	defer c.reading.Unlock()
	if f = c.cur.Load(); f != nil {
		return f
	}
	return e.readSettings(ctx)
}

// readSettings reads the claim flags (reading held) and keeps them unless
// a change came meanwhile; when they cannot be read, every queue may be
// limited and fair, and nothing is kept.
func (e *Engine) readSettings(ctx context.Context) *claimFlags {
	c := &e.claimSettings
	gen := c.gen.Load()
	limits, err := e.store.ListLimits(ctx)
	if err != nil {
		return &claimFlags{unknown: true}
	}
	fairs, err := e.store.ListFair(ctx)
	if err != nil {
		return &claimFlags{unknown: true}
	}
	f := &claimFlags{read: time.Now(), limits: map[string]bool{}, rates: map[string]bool{}, fairs: map[string]bool{}}
	for _, l := range limits {
		f.limits[l.Queue] = true
		if l.Type() == store.LimitRate {
			f.rates[l.Queue] = true
		}
	}
	for _, q := range fairs {
		f.fairs[q.Queue] = true
	}
	if c.gen.Load() == gen {
		c.cur.Store(f)
	}
	return f
}

// limited tells whether queue has limits (claimFlags.limited).
func (e *Engine) limited(ctx context.Context, queue string) bool {
	return e.settings(ctx).limited(queue)
}

// changed makes the next claim reread the settings (a limit or fairness
// set or removed through this engine binds at once).
func (e *Engine) changed() {
	e.claimSettings.gen.Add(1)
	e.claimSettings.cur.Store(nil)
}

// LimitsChanged makes the next claim reread which queues have limits.
func (e *Engine) LimitsChanged() { e.changed() }

// FairChanged makes the next claim reread which queues are fair.
func (e *Engine) FairChanged() { e.changed() }
