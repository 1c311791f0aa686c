package maintenance

import (
	"context"
	"log/slog"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// LeaseStore is what lease expiry needs from a store.
type LeaseStore interface {
	ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*bt.Task, error)
	Settle(ctx context.Context, s []store.Settlement) ([]bool, error)
}

// Settled is told which settlements a service's round applied (oks[i]:
// ss[i] applied; another process or the worker itself may have settled the
// task first). The root package counts and traces them.
type Settled func(ctx context.Context, tasks []*bt.Task, ss []store.Settlement, oks []bool)

// LeaseExpiry settles the attempts whose lease expired (the worker stopped
// heartbeating): outcome lease_expired, then retry or dead letter as the
// task's policy decides, or canceled when cancellation was requested.
type LeaseExpiry struct {
	base
	store LeaseStore
	now   func() time.Time
	// retry fills s's state (retry or dead letter) for task t by policy.
	retry   func(s *store.Settlement, t *bt.Task, now time.Time)
	settled Settled
	log     *slog.Logger
}

// NewLeaseExpiry makes the "lease_expiry" service.
func NewLeaseExpiry(s LeaseStore, now func() time.Time, every time.Duration,
	retry func(s *store.Settlement, t *bt.Task, now time.Time), settled Settled, log *slog.Logger) *LeaseExpiry {
	return &LeaseExpiry{base: base{"lease_expiry", every}, store: s, now: now, retry: retry, settled: settled, log: log}
}

// RunOnce settles one batch of expired leases. Every settlement is
// conditional on the lease it names, so it is safe anywhere.
func (l *LeaseExpiry) RunOnce(ctx context.Context) error {
	expired, err := l.store.ExpiredLeases(ctx, l.now(), Batch)
	if err != nil || len(expired) == 0 {
		return err
	}
	now := l.now()
	ss := make([]store.Settlement, len(expired))
	for i, t := range expired {
		s := store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, FinishedAt: now,
			Outcome: bt.OutcomeLeaseExpired, Error: "lease expired: the worker stopped heartbeating (" + t.WorkerID + ")"}
		if t.CancelRequestedAt != nil {
			s.State = bt.StateCanceled
		} else {
			l.retry(&s, t, now)
		}
		ss[i] = s
	}
	oks, err := l.store.Settle(ctx, ss)
	if err != nil {
		return err
	}
	l.log.Warn("settled expired leases", "tasks", len(ss))
	l.settled(ctx, expired, ss, oks)
	return nil
}
