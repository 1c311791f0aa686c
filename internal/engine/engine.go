// Package engine is Backstop's engine: the operations every way of working
// tasks shares. Prepare validates and prepares what is enqueued; Claim
// leases claimable tasks (ordering admission included); Decide turns how an
// attempt ended into the task's next state by the retry policy; Settle
// writes settlements, advancing workflow runs in the same transaction; the
// lease tokens prove a remote attempt. The library (the root package), the
// remote worker protocol (internal/remote) and the maintenance services
// (internal/maintenance) call it; it imports none of them.
package engine

import (
	"errors"
	"fmt"
	"sync"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// The task model, as the engine names it.
type (
	Task        = bt.Task
	Execution   = bt.Execution
	State       = bt.State
	Outcome     = bt.Outcome
	Progress    = bt.Progress
	RetryPolicy = bt.RetryPolicy
	Event       = bt.Event
)

// Engine is the engine over one store and configuration. It is safe for
// concurrent use.
type Engine struct {
	store store.Store
	cfg   *Config
	// Telemetry holds the instruments every path records to.
	Telemetry *Telemetry

	batcher         settleBatcher             // settle.go: concurrent single settlements, coalesced
	enqueues        coalescer[*enqueueReq]    // enqueue.go: concurrent single enqueues, coalesced
	remoteAttempts  remoteAttempts            // remote_attempts.go: remote attempts' spans
	lkeys           leaseKeys                 // leasetoken.go
	ordering        OrderingStats             // ordering.go: all queues
	orderingByQueue map[string]*OrderingStats // ordering.go: per ordered queue (read-only)
	implicit        implicitOrdering          // ordering.go: undeclared queues with ordered tasks
	plans           sync.Map                  // workflows.go: plan hash -> *workflow.Definition
	latest          sync.Map                  // latestversion.go: workflow name -> its latest *store.WorkflowDef seen
	claimSettings   claimSettings             // claimsettings.go: which queues have limits, which are fair
	// SettleSeen, set only by tests, sees every batch Settle applies.
	SettleSeen func([]store.Settlement)
}

// New makes an engine over s. A nil cfg takes every default.
func New(s store.Store, cfg *Config) (*Engine, error) {
	if s == nil {
		return nil, errors.New("backstop: nil store")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	e := &Engine{store: s, cfg: c, orderingByQueue: newQueueOrderingStats(c)}
	tel, err := newTelemetry(c.MeterProvider, c.TracerProvider, c.LoggerProvider, e.orderingByQueue)
	if err != nil {
		return nil, fmt.Errorf("backstop: telemetry: %w", err)
	}
	e.Telemetry = tel
	return e, nil
}

// Store is the engine's store.
func (e *Engine) Store() store.Store { return e.store }

// Config is the effective configuration (defaults filled in).
func (e *Engine) Config() *Config { return e.cfg }

// Now is the configured clock's time.
func (e *Engine) Now() time.Time { return e.cfg.Clock.Now() }
