package backstop

import (
	"context"
	"errors"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// retentionBatch is how many tasks one retention transaction deletes, so
// that it never holds locks for long.
const retentionBatch = 1000

// RetentionResult counts what one retention round deleted.
type RetentionResult struct {
	Succeeded   int `json:"succeeded"`
	Canceled    int `json:"canceled"`
	DeadLetters int `json:"dead_letters"`
	Events      int `json:"events"`
	// OrderingKeys: expired, idle ordering key states (ordering.go).
	OrderingKeys int `json:"ordering_keys"`
}

// closedDLQ are the dead-letter statuses retention may delete; open dead
// letters wait for an operator and are never deleted.
var closedDLQ = []bt.DLQStatus{bt.DLQDiscarded, bt.DLQResolved, bt.DLQReplayed}

// Retain runs one retention round by Config.Retention: it deletes succeeded
// and canceled tasks finished longer ago than their retention, and closed
// dead letters (discarded, resolved, replayed under a new id) last changed
// longer ago than theirs, each with its executions, payloads and events, in
// batches of 1,000 per transaction; and events of the log older than
// Retention.Events. The maintenance leader runs it; it is
// safe to run anywhere (batches lock with SKIP LOCKED on Postgres).
func Retain(ctx context.Context, c *Client) (RetentionResult, error) {
	var res RetentionResult
	r := c.cfg.Retention
	now := c.now()
	drain := func(count *int, del func() (int, error)) error {
		for {
			n, err := del()
			*count += n
			if err != nil || n < retentionBatch {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	var errs []error
	if r.Succeeded >= 0 {
		errs = append(errs, drain(&res.Succeeded, func() (int, error) {
			return c.store.DeleteFinished(ctx, bt.StateSucceeded, now.Add(-r.Succeeded), retentionBatch)
		}))
	}
	if r.Canceled >= 0 {
		errs = append(errs, drain(&res.Canceled, func() (int, error) {
			return c.store.DeleteFinished(ctx, bt.StateCanceled, now.Add(-r.Canceled), retentionBatch)
		}))
	}
	if r.DeadLetters >= 0 {
		// PurgeDLQ (the operator's purge) batches by itself.
		n, err := c.store.PurgeDLQ(ctx, store.PurgeParams{Before: now.Add(-r.DeadLetters), Statuses: closedDLQ, Limit: retentionBatch})
		res.DeadLetters = n
		errs = append(errs, err)
	}
	if r.Events >= 0 {
		errs = append(errs, drain(&res.Events, func() (int, error) {
			return c.store.DeleteEventsBefore(ctx, now.Add(-r.Events), retentionBatch)
		}))
	}
	errs = append(errs, drain(&res.OrderingKeys, func() (int, error) { // ordering.go
		return c.store.DeleteIdleOrderingKeys(ctx, now, retentionBatch)
	}))
	return res, errors.Join(errs...)
}

// retain is the leader's retention round. A database role without DELETE
// (the least-privilege worker role) turns retention off for this worker
// with one warning: it belongs to a process with the admin role then.
func (w *Worker) retain(ctx context.Context) {
	res, err := Retain(ctx, w.c)
	if res.Succeeded+res.Canceled+res.DeadLetters+res.Events+res.OrderingKeys > 0 {
		w.log.Info("retention deleted finished work", "succeeded", res.Succeeded, "canceled", res.Canceled,
			"dead_letters", res.DeadLetters, "events", res.Events, "ordering_keys", res.OrderingKeys)
	}
	switch {
	case err == nil, ctx.Err() != nil:
	case errors.Is(err, store.ErrPermissionDenied):
		w.noRetention = true
		w.log.Warn("retention disabled in this worker: its database role may not delete (run retention with the admin role)",
			"error", err)
	default:
		w.log.Error("retention failed", "error", err)
	}
}
