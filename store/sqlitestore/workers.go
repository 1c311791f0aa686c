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
func (s *Store) WorkerExecutions(ctx context.Context, workerID string, limit int) ([]bt.Execution, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT execution_id, task_id, attempt, worker_id, started_at, finished_at,
		outcome, COALESCE(error, ''), COALESCE(error_detail, '') FROM backstop_executions WHERE worker_id = ?
		ORDER BY started_at DESC, execution_id DESC LIMIT ?`, workerID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: worker executions: %w", err)
	}
	return collectExecutions(rows) // tasks.go
}
