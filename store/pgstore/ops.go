package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// This file implements store.Ops: leadership, retention, statistics, views.

// DeleteFinished implements store.Ops.
func (s *Store) DeleteFinished(ctx context.Context, state bt.State, before time.Time, limit int) (int, error) {
	if state != bt.StateSucceeded && state != bt.StateCanceled {
		return 0, fmt.Errorf("pgstore: delete finished: state %q is not succeeded or canceled", state)
	}
	return s.deleteTasks(ctx, sqlDoomedFinished, string(state), before, sweepLimit(limit))
}

func (s *Store) deleteTasks(ctx context.Context, doomed string, args ...any) (int, error) {
	var events bool
	if err := s.pool.QueryRow(ctx, sqlHasEvents).Scan(&events); err != nil {
		return 0, fmt.Errorf("pgstore: retention: %w", err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, deleteTasks(doomed, events), args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: retention: %w", permission(err))
	}
	return n, nil
}

// tableSizes: every Backstop table of the current schema with its
// indexes and TOAST; the database's size is their sum.
func tableSizes(ctx context.Context, q sqldialect.Querier) ([]store.TableSize, int64, error) {
	rs, err := q.Query(ctx, sqlStatsTables)
	if err != nil {
		return nil, 0, err
	}
	defer rs.Close()
	var (
		out   []store.TableSize
		total int64
	)
	for rs.Next() {
		var t store.TableSize
		if err := rs.Scan(&t.Table, &t.Bytes); err != nil {
			return nil, 0, err
		}
		out = append(out, t)
		total += t.Bytes
	}
	return out, total, rs.Err()
}

// View implements store.Ops.
func (s *Store) View(ctx context.Context, v store.View, now time.Time, limit int) ([]*bt.Task, error) {
	if limit <= 0 {
		limit = defaultListLimit
	}
	var (
		tasks []*bt.Task
		err   error
	)
	switch v {
	case store.ViewPendingRetries:
		tasks, err = s.queryTasks(ctx, sqlViewPendingRetries, limit)
	case store.ViewRetryExhausted:
		tasks, err = s.queryTasks(ctx, sqlViewRetryExhausted, limit)
	case store.ViewRecentFailures:
		tasks, err = s.queryTasks(ctx, sqlViewRecentFailures, now.Add(-store.RecentFailuresWindow), limit)
	default:
		return nil, fmt.Errorf("pgstore: unknown view %q", v)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: view %s: %w", v, permission(err))
	}
	return tasks, nil
}

// permission marks PostgreSQL's insufficient_privilege (42501) with
// store.ErrPermissionDenied, keeping the server's message.
func permission(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return fmt.Errorf("%w: %w", store.ErrPermissionDenied, err)
	}
	return err
}
