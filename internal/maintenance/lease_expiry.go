package maintenance

import (
	"context"
	"time"

	"github.com/backstophq/backstop/internal/engine"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Settled is told which settlements a service's round applied (oks[i]:
// ss[i] applied; another process or the worker itself may have settled the
// task first), to count and trace them.
type Settled func(ctx context.Context, tasks []*bt.Task, ss []store.Settlement, oks []bool)

// LeaseExpiry settles the attempts whose lease expired (the worker stopped
// heartbeating): outcome lease_expired, then retry or dead letter as the
// task's policy decides (Engine.RetryOrDie), or canceled when cancellation
// was requested; through Engine.Settle, so a workflow step's run advances.
type LeaseExpiry struct {
	base
	e *engine.Engine
}

// NewLeaseExpiry makes the "lease_expiry" service.
func NewLeaseExpiry(e *engine.Engine, every time.Duration) *LeaseExpiry {
	return &LeaseExpiry{base: base{"lease_expiry", every}, e: e}
}

// RunOnce settles one batch of expired leases. Every settlement is
// conditional on the lease it names, so it is safe anywhere.
func (l *LeaseExpiry) RunOnce(ctx context.Context) error {
	expired, err := l.e.Store().ExpiredLeases(ctx, l.e.Now(), Batch)
	if err != nil || len(expired) == 0 {
		return err
	}
	now := l.e.Now()
	ss := make([]store.Settlement, len(expired))
	for i, t := range expired {
		s := store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, FinishedAt: now,
			Outcome: bt.OutcomeLeaseExpired, Error: "lease expired: the worker stopped heartbeating (" + t.WorkerID + ")"}
		if t.CancelRequestedAt != nil {
			s.State = bt.StateCanceled
		} else {
			l.e.RetryOrDie(&s, t, now)
		}
		ss[i] = s
	}
	oks, err := l.e.Settle(ctx, ss)
	if err != nil {
		return err
	}
	log := l.e.Config().Logger
	for i, t := range expired {
		if i < len(oks) && oks[i] {
			log.Warn("attempt lease expired", append(engine.TaskLogAttrs(t), "worker_id", t.WorkerID,
				"state", ss[i].State, "dead_reason", ss[i].DeadReason)...)
		}
	}
	log.Warn("settled expired leases", "tasks", len(ss))
	l.e.ExpiredSettled(ctx, expired, ss, oks)
	return nil
}
