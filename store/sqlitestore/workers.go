package sqlitestore

import (
	"context"
	"fmt"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Workers = (*Store)(nil)

// The registry is written once, in store/internal/sqldialect.

// WorkerExecutions implements store.Workers.
func (s *Store) WorkerExecutions(ctx context.Context, f store.WorkerExecutionFilter) ([]bt.Execution, error) {
	q, args := workerExecutionsQuery(f)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: worker executions: %w", err)
	}
	return collectExecutions(rows) // tasks.go
}

// workerExecutionsQuery: the worker's executions newest first, in the
// order of backstop_executions_worker (worker_id, started_at,
// execution_id; migration 00029), so a page reads its own rows only.
func workerExecutionsQuery(f store.WorkerExecutionFilter) (string, []any) {
	q := `SELECT execution_id, task_id, attempt, worker_id, started_at, finished_at,
		outcome, COALESCE(error, ''), COALESCE(error_detail, '') FROM backstop_executions WHERE worker_id = ?`
	args := []any{f.WorkerID}
	if f.Outcome != "" {
		q += ` AND outcome = ?`
		args = append(args, string(f.Outcome))
	}
	if f.Before != nil {
		q += ` AND (started_at < ? OR (started_at = ? AND execution_id < ?))`
		at := us(f.Before.StartedAt)
		args = append(args, at, at, f.Before.ExecutionID)
	}
	q += ` ORDER BY started_at DESC, execution_id DESC LIMIT ?`
	return q, append(args, f.Limit)
}
