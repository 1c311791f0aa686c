// Package leadership runs one election among processes on one store: a
// named lease in backstop_leaders that at most one candidate holds at a
// time. A candidate tries to take the lease at every round, renews it every
// TTL/3 while it holds it, and resigns it when it stops, so that another
// candidate takes over at once (or within the TTL when the holder dies).
//
// It imports only the standard library: the store is the narrow Store
// interface below (store.Ops satisfies it).
package leadership

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Store is what an election needs from a store.
type Store interface {
	// TryLead takes the lease named name for id when it is free or
	// expired, or renews it when id holds it, until now+ttl; it reports
	// whether id holds it afterwards.
	TryLead(ctx context.Context, name, id string, now time.Time, ttl time.Duration) (bool, error)
	// ResignLead gives the lease up if id holds it.
	ResignLead(ctx context.Context, name, id string) error
}

// Config configures an Elector.
type Config struct {
	// Name of the lease (backstop_leaders.name). Required.
	Name string
	// ID of this candidate, recorded in the lease. Required.
	ID string
	// TTL: how long the lease lasts without renewal. Required.
	TTL time.Duration
	// Now is the clock the lease's times are written with (the store's
	// clock; a test's fake clock). Default: time.Now. Whether this process
	// still trusts its lease is always measured on the wall clock.
	Now func() time.Time
	// Logger receives the changes of leadership. Default: slog.Default().
	Logger *slog.Logger
	// OnChange, when set, is called (from Run's goroutine) each time this
	// candidate takes or loses the lease.
	OnChange func(leading bool)
}

// Elector is one candidate in one election. IsLeader is safe for
// concurrent use; Run, Elect and Resign belong to one goroutine.
type Elector struct {
	store     Store
	cfg       Config
	until     atomic.Int64 // unix nanos (wall clock) until which this candidate leads; 0: it does not
	lastRenew time.Time
}

// New makes a candidate; it does nothing until Run or Elect.
func New(s Store, cfg Config) *Elector {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Elector{store: s, cfg: cfg}
}

// Name is the lease's name.
func (e *Elector) Name() string { return e.cfg.Name }

// IsLeader reports whether this candidate holds the lease now: it took or
// renewed it less than TTL ago.
func (e *Elector) IsLeader() bool {
	until := e.until.Load()
	return until != 0 && time.Now().UnixNano() < until
}

// Run takes part in the election until ctx ends, then resigns. A
// non-leader tries to take the lease every period (so a resigned or
// expired lease is taken within a period); the leader renews it every
// TTL/3. period is capped at TTL/3 (and at least a millisecond).
func (e *Elector) Run(ctx context.Context, period time.Duration) {
	period = max(min(period, e.cfg.TTL/3), time.Millisecond)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		e.Round(ctx)
		select {
		case <-ctx.Done():
			e.Resign()
			return
		case <-tick.C:
		}
	}
}

// Round takes the lease when this candidate does not hold it, or renews it
// when the last renewal is TTL/3 old; otherwise it does nothing.
func (e *Elector) Round(ctx context.Context) {
	now := time.Now()
	if !e.IsLeader() || now.Sub(e.lastRenew) >= e.cfg.TTL/3 {
		if e.Elect(ctx, now) {
			e.lastRenew = now
		}
	}
}

// Elect takes or renews the lease once and logs changes of leadership.
// started is when the attempt began (wall clock): the lease is trusted
// until started+TTL.
func (e *Elector) Elect(ctx context.Context, started time.Time) bool {
	was := e.IsLeader()
	name, log := e.cfg.Name, e.cfg.Logger
	won, err := e.store.TryLead(ctx, name, e.cfg.ID, e.cfg.Now(), e.cfg.TTL)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			log.Error(name+" election failed", "error", err)
		}
		if was && !e.IsLeader() {
			log.Warn(name + " leadership lost: the lease could not be renewed in time")
			e.changed(false)
		}
		return false
	case won:
		e.until.Store(started.Add(e.cfg.TTL).UnixNano())
		if !was {
			log.Info(name+" leadership taken", "leader_ttl", e.cfg.TTL.String())
			e.changed(true)
		}
		return true
	default:
		e.until.Store(0)
		if was {
			log.Warn(name + " leadership lost to another candidate")
			e.changed(false)
		}
		return false
	}
}

// Resign gives the lease up (if held) so another candidate takes over at
// once. It uses a context of its own: it runs while stopping.
func (e *Elector) Resign() {
	if !e.IsLeader() {
		return
	}
	e.until.Store(0)
	e.changed(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name := e.cfg.Name
	if err := e.store.ResignLead(ctx, name, e.cfg.ID); err != nil {
		e.cfg.Logger.Warn("resigning "+name+" leadership failed; another candidate takes over when the lease expires", "error", err)
		return
	}
	e.cfg.Logger.Info(name + " leadership resigned")
}

func (e *Elector) changed(leading bool) {
	if e.cfg.OnChange != nil {
		e.cfg.OnChange(leading)
	}
}
