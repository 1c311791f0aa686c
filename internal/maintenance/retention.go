package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// RetentionBatch is how many tasks one retention transaction deletes, so
// that it never holds locks for long.
const RetentionBatch = 1000

// RetentionStore is what retention needs from a store.
type RetentionStore interface {
	DeleteFinished(ctx context.Context, state bt.State, before time.Time, limit int) (int, error)
	PurgeDLQ(ctx context.Context, p store.PurgeParams) (int, error)
	DeleteEventsBefore(ctx context.Context, before time.Time, limit int) (int, error)
	DeleteIdleOrderingKeys(ctx context.Context, now time.Time, limit int) (int, error)
	DeleteFinishedRuns(ctx context.Context, states, stopped []store.RunState, before time.Time, limit int) (int, error)
}

// RetentionPolicy: how long finished work is kept; negative keeps it
// forever.
type RetentionPolicy struct {
	Succeeded, Canceled, DeadLetters, Events time.Duration
	// Runs: workflow runs that finished for good (workflow.FinishedRunStates)
	// or stopped (workflow.StoppedRunStates), from their end, with their
	// step rows, once none of their step tasks is an open dead letter or
	// still to settle.
	Runs time.Duration
}

// runStates are the states of the runs retention deletes.
var runStates = slices.Concat(workflow.FinishedRunStates, workflow.StoppedRunStates)

// RetentionCounts counts what one round deleted.
type RetentionCounts struct {
	Succeeded, Canceled, DeadLetters, Events, OrderingKeys, Runs int
}

// closedDLQ are the dead-letter statuses retention may delete; open dead
// letters wait for an operator and are never deleted.
var closedDLQ = []bt.DLQStatus{bt.DLQDiscarded, bt.DLQResolved, bt.DLQReplayed}

// Retention deletes finished work older than its policy. A process whose
// database role may not delete (store.ErrPermissionDenied, the
// least-privilege worker role) takes no retention duty: RunOnce wraps
// ErrNoDuty, the maintainer stops the service here and leaves the
// retention election, and a process that may delete takes it.
type Retention struct {
	base
	store  RetentionStore
	now    func() time.Time
	policy RetentionPolicy
	log    *slog.Logger
}

// NewRetention makes the "retention" service.
func NewRetention(s RetentionStore, now func() time.Time, every time.Duration, p RetentionPolicy, log *slog.Logger) *Retention {
	return &Retention{base: base{"retention", every}, store: s, now: now, policy: p, log: log}
}

// RunOnce runs one retention round and logs what it deleted.
func (r *Retention) RunOnce(ctx context.Context) error {
	res, err := Retain(ctx, r.store, r.now(), r.policy)
	if res.Succeeded+res.Canceled+res.DeadLetters+res.Events+res.OrderingKeys+res.Runs > 0 {
		r.log.Info("retention deleted finished work", "succeeded", res.Succeeded, "canceled", res.Canceled,
			"dead_letters", res.DeadLetters, "events", res.Events, "ordering_keys", res.OrderingKeys, "runs", res.Runs)
	}
	if errors.Is(err, store.ErrPermissionDenied) {
		return fmt.Errorf("%w: the database role may not delete (run retention with the admin role): %w", ErrNoDuty, err)
	}
	return err
}

// Retain runs one retention round at now: it deletes succeeded and
// canceled tasks finished longer ago than their retention, and closed dead
// letters (discarded, resolved, replayed under a new id) last changed
// longer ago than theirs, each with its executions, payloads and events,
// in batches of RetentionBatch per transaction; events of the log older
// than p.Events; workflow runs that finished for good longer ago than
// p.Runs, with their step rows; and expired, idle ordering key states. It is safe to run
// anywhere (batches lock with SKIP LOCKED on Postgres).
func Retain(ctx context.Context, s RetentionStore, now time.Time, p RetentionPolicy) (RetentionCounts, error) {
	var res RetentionCounts
	drain := func(count *int, del func() (int, error)) error {
		for {
			n, err := del()
			*count += n
			if err != nil || n < RetentionBatch {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	var errs []error
	if p.Succeeded >= 0 {
		errs = append(errs, drain(&res.Succeeded, func() (int, error) {
			return s.DeleteFinished(ctx, bt.StateSucceeded, now.Add(-p.Succeeded), RetentionBatch)
		}))
	}
	if p.Canceled >= 0 {
		errs = append(errs, drain(&res.Canceled, func() (int, error) {
			return s.DeleteFinished(ctx, bt.StateCanceled, now.Add(-p.Canceled), RetentionBatch)
		}))
	}
	if p.DeadLetters >= 0 {
		// PurgeDLQ (the operator's purge) batches by itself.
		n, err := s.PurgeDLQ(ctx, store.PurgeParams{Before: now.Add(-p.DeadLetters), Statuses: closedDLQ, Limit: RetentionBatch})
		res.DeadLetters = n
		errs = append(errs, err)
	}
	if p.Events >= 0 {
		errs = append(errs, drain(&res.Events, func() (int, error) {
			return s.DeleteEventsBefore(ctx, now.Add(-p.Events), RetentionBatch)
		}))
	}
	if p.Runs >= 0 {
		errs = append(errs, drain(&res.Runs, func() (int, error) {
			// Every run is kept while one of its step tasks is an open
			// dead letter or still to settle: a replay needs the run (a
			// fan-out item's payload refers to the run's input).
			return s.DeleteFinishedRuns(ctx, nil, runStates, now.Add(-p.Runs), RetentionBatch)
		}))
	}
	errs = append(errs, drain(&res.OrderingKeys, func() (int, error) {
		return s.DeleteIdleOrderingKeys(ctx, now, RetentionBatch)
	}))
	return res, errors.Join(errs...)
}
