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

// recentSuccessWindow is how many of the most recently succeeded tasks
// the worker view looks through for a worker's successes.
const recentSuccessWindow = 10000

// sqlWorkerExecutions: the newest recorded executions of worker $1 (by
// backstop_executions_worker), and its successes among the
// recentSuccessWindow tasks that succeeded last (their rows, newest first
// by backstop_tasks_finished: a success writes no entry to any index of its
// own, migration 00016), at most $2 of each, then at most $2 in all; of
// outcome $3 (”: any), older than ($4, $5) when $4 is not null.
var sqlWorkerExecutions = `
(SELECT execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome, error, error_detail
	FROM backstop_executions WHERE worker_id = $1 AND ($3 = '' OR outcome = $3)
		AND ($4::timestamptz IS NULL OR (started_at, execution_id) < ($4, $5::text))
	ORDER BY started_at DESC, execution_id DESC LIMIT $2)
UNION ALL
(` + succeededExecutions(`(SELECT * FROM backstop_tasks WHERE state = 'succeeded'
		ORDER BY finalized_at DESC LIMIT `+strconv.Itoa(recentSuccessWindow)+`) t`) + ` AND t.worker_id = $1
		AND $3 IN ('', 'succeeded')
		AND ($4::timestamptz IS NULL OR (coalesce(t.attempted_at, t.finalized_at), t.execution_id) < ($4, $5::text))
	ORDER BY coalesce(t.attempted_at, t.finalized_at) DESC, t.execution_id DESC LIMIT $2)
ORDER BY 5 DESC, 1 DESC LIMIT $2`

// WorkerExecutions implements store.Workers.
func (s *Store) WorkerExecutions(ctx context.Context, f store.WorkerExecutionFilter) ([]bt.Execution, error) {
	var before *time.Time
	var beforeID string
	if f.Before != nil {
		before, beforeID = &f.Before.StartedAt, f.Before.ExecutionID
	}
	rows, err := s.pool.Query(ctx, sqlWorkerExecutions, f.WorkerID, f.Limit, string(f.Outcome), before, beforeID)
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
