package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Workers = (*Store)(nil)

// The registry is written once, in store/internal/sqldialect.

// RegisterWorker implements store.Workers.
func (s *Store) RegisterWorker(ctx context.Context, w store.WorkerInfo) error {
	return dialect.RegisterWorker(ctx, s.runner(), w)
}

// SeeWorker implements store.Workers.
func (s *Store) SeeWorker(ctx context.Context, w store.WorkerInfo, now time.Time) error {
	return dialect.SeeWorker(ctx, s.runner(), w, now)
}

// TouchWorkers implements store.Workers.
func (s *Store) TouchWorkers(ctx context.Context, ids []string, now time.Time) error {
	return dialect.TouchWorkers(ctx, s.runner(), ids, now)
}

// SetWorkerState implements store.Workers.
func (s *Store) SetWorkerState(ctx context.Context, id string, st store.WorkerState, now time.Time) error {
	return dialect.SetWorkerState(ctx, s.runner(), id, st, now)
}

// MarkLostWorkers implements store.Workers.
func (s *Store) MarkLostWorkers(ctx context.Context, now time.Time, staleAfter time.Duration) ([]string, error) {
	return dialect.MarkLostWorkers(ctx, s.runner(), now, staleAfter)
}

// ListWorkers implements store.Workers.
func (s *Store) ListWorkers(ctx context.Context, f store.WorkerFilter) ([]store.WorkerInfo, error) {
	return dialect.ListWorkers(ctx, s.runner(), f)
}

// GetWorker implements store.Workers.
func (s *Store) GetWorker(ctx context.Context, id string, now time.Time, staleAfter time.Duration) (*store.WorkerInfo, error) {
	return dialect.GetWorker(ctx, s.runner(), id, now, staleAfter)
}

// CountWorkersByState implements store.Workers.
func (s *Store) CountWorkersByState(ctx context.Context, now time.Time, staleAfter time.Duration) (map[store.WorkerState]int, error) {
	return dialect.CountWorkersByState(ctx, s.runner(), now, staleAfter)
}

// recentSuccessWindow is how many of the most recently succeeded tasks
// the worker view looks through for a worker's successes.
const recentSuccessWindow = 10000

// sqlWorkerExecutions: the newest recorded executions of worker $1 (by
// backstop_executions_worker), and its successes among the
// recentSuccessWindow tasks that succeeded last (their rows, newest first
// by backstop_tasks_finished: a success writes no entry to any index of its
// own, migration 00016), at most $2 of each, then at most $2 in all.
var sqlWorkerExecutions = `
(SELECT execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome, error, error_detail
	FROM backstop_executions WHERE worker_id = $1 ORDER BY started_at DESC, execution_id DESC LIMIT $2)
UNION ALL
(` + succeededExecutions(`(SELECT * FROM backstop_tasks WHERE state = 'succeeded'
		ORDER BY finalized_at DESC LIMIT `+strconv.Itoa(recentSuccessWindow)+`) t`) + ` AND t.worker_id = $1
	ORDER BY t.attempted_at DESC, t.execution_id DESC LIMIT $2)
ORDER BY 5 DESC, 1 DESC LIMIT $2`

// WorkerExecutions implements store.Workers.
func (s *Store) WorkerExecutions(ctx context.Context, workerID string, limit int) ([]bt.Execution, error) {
	rows, err := s.pool.Query(ctx, sqlWorkerExecutions, workerID, limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: worker executions: %w", err)
	}
	defer rows.Close()
	out := []bt.Execution{}
	for rows.Next() {
		e, err := scanExecution(rows)
		if err != nil {
			return nil, fmt.Errorf("pgstore: worker executions: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
