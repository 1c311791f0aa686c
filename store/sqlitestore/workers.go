package sqlitestore

import (
	"context"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Workers = (*Store)(nil)

// The registry is written once, in store/internal/sqldialect.

// RegisterWorker implements store.Workers.
func (s *Store) RegisterWorker(ctx context.Context, w store.WorkerInfo) error {
	return dialect.RegisterWorker(ctx, s.writer(), w)
}

// SeeWorker implements store.Workers.
func (s *Store) SeeWorker(ctx context.Context, w store.WorkerInfo, now time.Time) error {
	return dialect.SeeWorker(ctx, s.writer(), w, now)
}

// TouchWorkers implements store.Workers.
func (s *Store) TouchWorkers(ctx context.Context, ids []string, now time.Time) error {
	return dialect.TouchWorkers(ctx, s.writer(), ids, now)
}

// SetWorkerState implements store.Workers.
func (s *Store) SetWorkerState(ctx context.Context, id string, st store.WorkerState, now time.Time) error {
	return dialect.SetWorkerState(ctx, s.writer(), id, st, now)
}

// MarkLostWorkers implements store.Workers.
func (s *Store) MarkLostWorkers(ctx context.Context, now time.Time, staleAfter time.Duration) ([]string, error) {
	return dialect.MarkLostWorkers(ctx, s.writer(), now, staleAfter)
}

// ListWorkers implements store.Workers.
func (s *Store) ListWorkers(ctx context.Context, f store.WorkerFilter) ([]store.WorkerInfo, error) {
	return dialect.ListWorkers(ctx, s.reader(), f)
}

// GetWorker implements store.Workers.
func (s *Store) GetWorker(ctx context.Context, id string, now time.Time, staleAfter time.Duration) (*store.WorkerInfo, error) {
	return dialect.GetWorker(ctx, s.reader(), id, now, staleAfter)
}

// CountWorkersByState implements store.Workers.
func (s *Store) CountWorkersByState(ctx context.Context, now time.Time, staleAfter time.Duration) (map[store.WorkerState]int, error) {
	return dialect.CountWorkersByState(ctx, s.reader(), now, staleAfter)
}

// WorkerExecutions implements store.Workers.
func (s *Store) WorkerExecutions(ctx context.Context, workerID string, limit int) ([]bt.Execution, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT execution_id, task_id, attempt, worker_id, started_at, finished_at,
		outcome, COALESCE(error, ''), COALESCE(error_detail, '') FROM backstop_executions WHERE worker_id = ?
		ORDER BY started_at DESC, execution_id DESC LIMIT ?`, workerID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: worker executions: %w", err)
	}
	return collectExecutions(rows) // tasks.go
}
