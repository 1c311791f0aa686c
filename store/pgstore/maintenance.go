package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// defaultSweepLimit applies when a maintenance call passes no limit.
const defaultSweepLimit = 1000

// RequestCancel implements store.Store: a waiting (scheduled, pending or
// buffered) task is canceled at once; a running one is marked, and its
// worker learns it from its next heartbeat.
func (s *Store) RequestCancel(ctx context.Context, id string, now time.Time) (*bt.Task, error) {
	tasks, err := s.queryTasks(ctx, sqlRequestCancel, id, now, store.ActorFrom(ctx, store.DefaultActor), store.ReasonFrom(ctx))
	if err != nil {
		return nil, fmt.Errorf("pgstore: cancel %s: %w", id, err)
	}
	if len(tasks) == 1 {
		return tasks[0], nil
	}
	var state string
	if err := s.pool.QueryRow(ctx, sqlTaskState, id).Scan(&state); err != nil {
		if isNoRows(err) {
			return nil, notFound(id)
		}
		return nil, fmt.Errorf("pgstore: cancel %s: %w", id, err)
	}
	return nil, fmt.Errorf("pgstore: cancel %s: task is %s: %w", id, state, store.ErrConflict)
}

// ExpiredLeases implements store.Store: running tasks whose lease ran out,
// the longest expired first.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*bt.Task, error) {
	tasks, err := s.queryTasks(ctx, sqlExpiredLeases, now, sweepLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: expired leases: %w", err)
	}
	return tasks, nil
}

// PastDeadline implements store.Store: waiting tasks whose deadline passed.
func (s *Store) PastDeadline(ctx context.Context, now time.Time, limit int) ([]*bt.Task, error) {
	tasks, err := s.queryTasks(ctx, sqlPastDeadline, now, sweepLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: past deadline: %w", err)
	}
	return tasks, nil
}

// PromoteScheduled implements store.Store: scheduled tasks whose run_at has
// come become pending, and their queues are woken.
func (s *Store) PromoteScheduled(ctx context.Context, now time.Time, limit int) (int, error) {
	rs, err := s.pool.Query(ctx, sqlPromote, now, sweepLimit(limit))
	if err != nil {
		return 0, fmt.Errorf("pgstore: promote scheduled: %w", err)
	}
	var n, total int64
	if _, err := pgx.ForEachRow(rs, []any{&n}, func() error { total += n; return nil }); err != nil {
		return 0, fmt.Errorf("pgstore: promote scheduled: %w", err)
	}
	return int(total), nil
}

func sweepLimit(limit int) int {
	if limit <= 0 {
		return defaultSweepLimit
	}
	return limit
}
