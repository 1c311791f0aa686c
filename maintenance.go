package backstop

import (
	"context"
	"errors"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

const maintenanceBatch = 500

// Maintain runs one round of maintenance: promotes scheduled tasks whose time
// has come, settles attempts whose lease expired (outcome lease_expired, then
// retry or dead-letter by policy) and dead-letters waiting tasks past their
// deadline (reason expired). It is safe to run from many processes at once:
// every settlement is conditional on the lease it names.
func Maintain(ctx context.Context, c *Client) error {
	var errs []error
	for {
		n, err := c.store.PromoteScheduled(ctx, c.now(), maintenanceBatch)
		if err != nil {
			errs = append(errs, err)
			break
		}
		if n < maintenanceBatch {
			break
		}
	}
	expired, err := c.store.ExpiredLeases(ctx, c.now(), maintenanceBatch)
	if err != nil {
		errs = append(errs, err)
	} else if len(expired) > 0 {
		now := c.now()
		ss := make([]store.Settlement, len(expired))
		for i, t := range expired {
			s := store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, FinishedAt: now,
				Outcome: bt.OutcomeLeaseExpired, Error: "lease expired: the worker stopped heartbeating (" + t.WorkerID + ")"}
			if t.CancelRequestedAt != nil {
				s.State = bt.StateCanceled
			} else {
				retryOrDie(c.cfg, &s, t, now)
			}
			ss[i] = s
		}
		if oks, err := c.store.Settle(ctx, ss); err != nil {
			errs = append(errs, err)
		} else {
			c.cfg.Logger.Warn("settled expired leases", "tasks", len(ss))
			c.expiredSettled(ctx, expired, ss, oks) // maintenance_telemetry.go
		}
	}
	late, err := c.store.PastDeadline(ctx, c.now(), maintenanceBatch)
	if err != nil {
		errs = append(errs, err)
	} else if len(late) > 0 {
		now := c.now()
		ss := make([]store.Settlement, len(late))
		for i, t := range late {
			ss[i] = store.Settlement{TaskID: t.ID, FinishedAt: now, State: bt.StateDead,
				DeadReason: bt.ReasonExpired, Error: "deadline passed before the task could run"}
		}
		if oks, err := c.store.Settle(ctx, ss); err != nil {
			errs = append(errs, err)
		} else {
			c.deadlinesSettled(ctx, late, ss, oks)
		}
	}
	// Spans of remote attempts settled elsewhere (remote_attempts.go).
	c.sweepRemote(ctx)
	if err := c.markLostWorkers(ctx); err != nil { // workers.go
		errs = append(errs, err)
	}
	for name := range c.cfg.Queues { // due ordering drains (ordering.go)
		if err := c.OrderQueue(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
