// Package maintenance runs Backstop's background services: small pieces of
// work that run again and again on an interval — promote scheduled tasks,
// settle expired leases, expire deadlines, drain ordering buffers, mark
// lost workers, end remote attempts' spans, retention. Each service is one
// file here with its own test; it takes the engine (internal/engine) or the
// narrow store interface it needs, and owns its rule. A Maintainer runs the
// registered services, each on its own interval by its clock, while this
// process holds the leadership the service runs under
// (internal/leadership), and stops them all on Stop; Default registers the
// engine's services.
//
// The package never imports the root package: the library calls it.
//
// Adding a service (a periodic scheduler, a relay) is one new file with a
// type that implements Service, its test, and one Register call in
// Default.
package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/internal/leadership"
)

// Service is one piece of background work.
type Service interface {
	// Name names the service in logs and test signals (snake_case).
	Name() string
	// Interval: how long between two runs (while leading).
	Interval() time.Duration
	// RunOnce does one round of the work. An error is logged and the
	// service runs again at the next interval, except ErrNoDuty.
	RunOnce(ctx context.Context) error
}

// ErrNoDuty is wrapped by a service's RunOnce when this process may not do
// the service's work at all (its database role may not delete, say). The
// maintainer stops running the service in this process and, when no other
// service runs under the same leadership here, leaves that election, so
// that a process that may do the work takes the leadership.
var ErrNoDuty = errors.New("this process may not do this work")

// Config configures a Maintainer.
type Config struct {
	// ID of this process in every election it joins. Required.
	ID string
	// TTL of the leaderships it holds. Required.
	TTL time.Duration
	// Store holds the leases.
	Store leadership.Store
	// Now is the clock: the leases' times in the store
	// (leadership.Config.Now) and whether a service is due (its interval
	// since its last run) are read from it; the wait between checks is
	// real time. Default: time.Now.
	Now func() time.Time
	// Logger. Default: slog.Default().
	Logger *slog.Logger
	// Hooks are test signals.
	Hooks Hooks
}

// Hooks let tests wait for what the maintainer did instead of sleeping.
// They are called from the maintainer's goroutines and must not block for
// long.
type Hooks struct {
	// Ran is called after each run of a service, with its error.
	Ran func(service string, err error)
	// Leading is called when this process takes (true) or loses (false)
	// the leadership named lease.
	Leading func(lease string, leading bool)
	// Withdrawn is called when a service returned ErrNoDuty and stopped
	// running in this process.
	Withdrawn func(service string)
}

// Maintainer runs registered services while it holds their leadership.
// Register before Start; Stop ends every goroutine Start started.
type Maintainer struct {
	cfg       Config
	elections []*election
	mu        sync.Mutex
	started   bool
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// election is one leadership and the services that run while it is held.
// The unnamed election ("") has no lease: its services run in every
// process.
type election struct {
	lease    string
	el       atomic.Pointer[leadership.Elector] // nil for "" and before Start
	services []*runner
	active   atomic.Int32 // services not withdrawn
	cancel   context.CancelFunc
}

type runner struct {
	Service
	wake chan struct{} // the leadership was taken: run now if due
}

// New makes a maintainer.
func New(cfg Config) *Maintainer {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Maintainer{cfg: cfg}
}

// Register adds a service that runs while this process holds the
// leadership named lease ("": in every process, without an election).
// It panics after Start.
func (m *Maintainer) Register(lease string, s Service) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		panic("maintenance: Register after Start")
	}
	var e *election
	for _, x := range m.elections {
		if x.lease == lease {
			e = x
		}
	}
	if e == nil {
		e = &election{lease: lease}
		m.elections = append(m.elections, e)
	}
	e.services = append(e.services, &runner{Service: s, wake: make(chan struct{}, 1)})
}

// IsLeader reports whether this process holds the leadership named lease.
func (m *Maintainer) IsLeader(lease string) bool {
	for _, e := range m.elections {
		if el := e.el.Load(); e.lease == lease && el != nil {
			return el.IsLeader()
		}
	}
	return false
}

// Start joins the elections and starts the services. It returns at once.
func (m *Maintainer) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return errors.New("maintenance: already started")
	}
	m.started = true
	ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, e := range m.elections {
		ectx, cancel := context.WithCancel(ctx)
		e.cancel = cancel
		e.active.Store(int32(len(e.services)))
		period := e.period(m.cfg.TTL)
		if e.lease != "" {
			el := leadership.New(m.cfg.Store, leadership.Config{Name: e.lease, ID: m.cfg.ID, TTL: m.cfg.TTL,
				Now: m.cfg.Now, Logger: m.cfg.Logger, OnChange: m.onChange(e)})
			e.el.Store(el)
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				el.Run(ectx, period)
			}()
		}
		for _, r := range e.services {
			m.wg.Add(1)
			go m.run(ectx, e, r, period)
		}
	}
	return nil
}

// Stop stops every service (a running round sees its context end),
// resigns the leaderships held and returns when every goroutine ended.
// The maintainer may be started again.
func (m *Maintainer) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return
	}
	m.cancel()
	m.wg.Wait()
	m.started = false
}

// period is how often the election's candidates try the lease and its
// services check whether they are due: the shortest interval, at most a
// third of the TTL.
func (e *election) period(ttl time.Duration) time.Duration {
	p := ttl / 3
	if e.lease == "" || p <= 0 {
		p = time.Hour
	}
	for _, r := range e.services {
		p = min(p, r.Interval())
	}
	return max(p, time.Millisecond)
}

func (e *election) leading() bool {
	el := e.el.Load()
	return e.lease == "" || el != nil && el.IsLeader()
}

func (m *Maintainer) onChange(e *election) func(bool) {
	return func(leading bool) {
		if leading {
			for _, r := range e.services {
				select {
				case r.wake <- struct{}{}:
				default:
				}
			}
		}
		if h := m.cfg.Hooks.Leading; h != nil {
			h(e.lease, leading)
		}
	}
}

// run runs one service: whenever it is due and this process leads.
func (m *Maintainer) run(ctx context.Context, e *election, r *runner, period time.Duration) {
	defer m.wg.Done()
	tick := time.NewTicker(period)
	defer tick.Stop()
	every := r.Interval()
	var last time.Time
	for {
		if now := m.cfg.Now(); e.leading() && now.Sub(last) >= every {
			last = now
			err := r.RunOnce(ctx)
			if ctx.Err() != nil {
				return
			}
			if h := m.cfg.Hooks.Ran; h != nil {
				h(r.Name(), err)
			}
			switch {
			case errors.Is(err, ErrNoDuty):
				m.withdraw(e, r, err)
				return
			case err != nil:
				m.cfg.Logger.Error(r.Name()+" failed", "service", r.Name(), "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.wake:
		}
	}
}

// withdraw stops a service in this process; the last one of an election
// takes this process out of that election (resigning the lease).
func (m *Maintainer) withdraw(e *election, r *runner, err error) {
	what := "this process leaves the " + e.lease + " election: another process takes it"
	if e.active.Add(-1) > 0 || e.lease == "" {
		what = "other services go on"
	} else {
		e.cancel()
	}
	m.cfg.Logger.Warn(r.Name()+" disabled in this process: "+what, "service", r.Name(), "error", err)
	if h := m.cfg.Hooks.Withdrawn; h != nil {
		h(r.Name())
	}
}

// base gives a service its name and interval.
type base struct {
	name  string
	every time.Duration
}

func (b base) Name() string            { return b.name }
func (b base) Interval() time.Duration { return b.every }
