package backstop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/backstophq/backstop/internal/maintenance"
)

// RetentionResult counts what one retention round deleted.
type RetentionResult struct {
	Succeeded   int `json:"succeeded"`
	Canceled    int `json:"canceled"`
	DeadLetters int `json:"dead_letters"`
	Events      int `json:"events"`
	// OrderingKeys: expired, idle ordering key states (ordering.go).
	OrderingKeys int `json:"ordering_keys"`
	// Runs: workflow runs finished for good, with their step rows.
	Runs int `json:"runs"`
}

// Retain runs one retention round by Config.Retention now, whoever leads
// (internal/maintenance/retention.go): it deletes succeeded and canceled
// tasks finished longer ago than their retention, and closed dead letters
// (discarded, resolved, replayed under a new id) last changed longer ago
// than theirs, each with its executions, payloads and events, in batches of
// 1,000 per transaction; events of the log older than Retention.Events;
// and workflow runs finished for good longer ago than Retention.Runs. The retention leader runs it; it is safe to run
// anywhere (batches lock with SKIP LOCKED on Postgres).
func Retain(ctx context.Context, c *Client) (RetentionResult, error) {
	r, err := maintenance.Retain(ctx, c.store, c.e.Now(), maintenance.PolicyOf(c.cfg))
	return RetentionResult{Succeeded: r.Succeeded, Canceled: r.Canceled, DeadLetters: r.DeadLetters,
		Events: r.Events, OrderingKeys: r.OrderingKeys, Runs: r.Runs}, err
}

// MaintenanceLeadership names the lease in backstop_leaders that the
// maintenance leader holds: among all processes on one store (one SQLite
// file, or one Postgres shared by many hosts) only its holder promotes
// scheduled tasks, settles expired leases, expires deadlines, drains
// ordering buffers and marks lost workers.
const MaintenanceLeadership = maintenance.MaintenanceLeadership

// RetentionLeadership names the lease whose holder runs retention. Every
// maintainer stands for it, except in a process whose database role may not
// delete: that one leaves this election at its first refused retention
// round (one warning) and another process takes it.
const RetentionLeadership = maintenance.RetentionLeadership

// MaintainerConfig configures a Maintainer. Zero values take the default
// named at the end of each field's comment.
type MaintainerConfig struct {
	// ID names this process in the leadership leases. Default:
	// host-pid-random.
	ID string
	// Interval: how often the maintenance leader runs each maintenance
	// service. Default: 1s.
	Interval time.Duration
	// LeaderTTL: how long a leadership lasts without renewal (renewed every
	// LeaderTTL/3). When the leader dies another process takes over within
	// about this long; a graceful Stop hands over at once. Default: 15s.
	LeaderTTL time.Duration
}

// Maintainer runs the leader-run services of one client
// (internal/maintenance): it joins the maintenance and retention elections
// and, while it holds each, runs that leadership's services on their
// intervals. A Worker owns one (unless its MaintenanceInterval is
// negative); `backstop serve` runs one for the server.
type Maintainer struct {
	m  *maintenance.Maintainer
	id string
}

// NewMaintainer makes a maintainer over the client's store; Start it.
func (c *Client) NewMaintainer(cfg *MaintainerConfig) (*Maintainer, error) {
	if cfg == nil {
		cfg = &MaintainerConfig{}
	}
	id := cmp.Or(cfg.ID, defaultID())
	every := cmp.Or(cfg.Interval, time.Second)
	ttl := cmp.Or(cfg.LeaderTTL, 15*time.Second)
	if every < 0 {
		return nil, fmt.Errorf("backstop: maintenance interval %s is negative", every)
	}
	if ttl < 100*time.Millisecond {
		return nil, fmt.Errorf("backstop: leader TTL %s is shorter than 100ms", ttl)
	}
	return &Maintainer{m: c.maintainer(id, every, ttl, maintenance.Hooks{}), id: id}, nil
}

func (c *Client) maintainer(id string, every, ttl time.Duration, hooks maintenance.Hooks) *maintenance.Maintainer {
	m := maintenance.New(maintenance.Config{ID: id, TTL: ttl, Store: c.store, Now: c.e.Now,
		Logger: c.cfg.Logger.With("leader_id", id), Hooks: hooks})
	maintenance.Default(m, c.e, every)
	return m
}

func defaultID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%04x", cmp.Or(host, "worker"), os.Getpid(), rand.IntN(1<<16))
}

// ID is the maintainer's id in the leadership leases.
func (m *Maintainer) ID() string { return m.id }

// Start joins the elections and starts the services; it returns at once.
func (m *Maintainer) Start(ctx context.Context) error { return m.m.Start(ctx) }

// Stop stops the services, resigns the leaderships it holds (so another
// process takes over at once) and returns when every goroutine it started
// has ended.
func (m *Maintainer) Stop() { m.m.Stop() }

// IsLeader reports whether this maintainer holds the maintenance
// leadership now: it renewed the lease less than LeaderTTL ago.
func (m *Maintainer) IsLeader() bool { return m.m.IsLeader(MaintenanceLeadership) }

// IsRetentionLeader reports whether this maintainer holds the retention
// leadership now.
func (m *Maintainer) IsRetentionLeader() bool { return m.m.IsLeader(RetentionLeadership) }

// IsLeader reports whether this worker holds the maintenance leadership
// now (false when it takes no part in the election).
func (w *Worker) IsLeader() bool { return w.maint != nil && w.maint.IsLeader() }

// Maintain runs one round of maintenance now, whoever leads: it promotes
// scheduled tasks whose time has come, settles attempts whose lease expired
// (outcome lease_expired, then retry or dead-letter by policy),
// dead-letters waiting tasks past their deadline (reason expired), ends the
// spans of remote attempts settled elsewhere, marks lost workers and runs
// due ordering drains. It is safe to run from many processes at once:
// every settlement is conditional on the lease it names.
func Maintain(ctx context.Context, c *Client) error {
	var errs []error
	for _, s := range maintenance.Services(c.e, time.Second) {
		if err := s.RunOnce(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	c.e.SweepRemote(ctx)
	return errors.Join(errs...)
}
