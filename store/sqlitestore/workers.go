package sqlitestore

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Workers = (*Store)(nil)

// The registry is written once, in store/internal/sqldialect.

// recentSuccessWindow is how many of the most recently succeeded tasks
// the worker view looks through for a worker's successes.
const recentSuccessWindow = 10000

// WorkerExecutions implements store.Workers: the worker's recorded
// executions and its successes among the recentSuccessWindow tasks that
// succeeded last (a success writes no row and no index entry of its own:
// succeededExecutions), merged newest first, read in one snapshot.
func (s *Store) WorkerExecutions(ctx context.Context, f store.WorkerExecutionFilter) ([]bt.Execution, error) {
	tx, err := s.r.BeginTx(ctx, nil) // one snapshot for both reads
	if err != nil {
		return nil, fmt.Errorf("sqlite: worker executions: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	var arms [2][]bt.Execution
	for i, query := range []func(store.WorkerExecutionFilter) (string, []any){workerExecutionsQuery, workerSuccessesQuery} {
		q, args := query(f)
		if q == "" {
			continue
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: worker executions: %w", err)
		}
		if arms[i], err = collectExecutions(rows); err != nil { // tasks.go
			return nil, fmt.Errorf("sqlite: worker executions: %w", err)
		}
	}
	out := append(arms[0], arms[1]...)
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.StartedAt.Equal(b.StartedAt) {
			return a.StartedAt.After(b.StartedAt)
		}
		return a.ExecutionID > b.ExecutionID
	})
	return out[:min(len(out), f.Limit)], nil
}

// workerExecutionsQuery: the worker's recorded executions newest first, in
// the order of backstop_executions_worker (worker_id, started_at,
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

// workerSuccessesQuery: the worker's successes newest first among the
// recentSuccessWindow tasks that succeeded last, read newest first through
// backstop_tasks_finished; "" when f asks for another outcome.
func workerSuccessesQuery(f store.WorkerExecutionFilter) (string, []any) {
	if f.Outcome != "" && f.Outcome != bt.OutcomeSucceeded {
		return "", nil
	}
	q := succeededExecutions(`(SELECT id, state, execution_id, attempt, worker_id, attempted_at, finalized_at
		FROM backstop_tasks WHERE state IN ('succeeded', 'canceled') AND state = 'succeeded'
		ORDER BY finalized_at DESC LIMIT `+strconv.Itoa(recentSuccessWindow)+`) t`) + ` AND t.worker_id = ?` // tasks.go
	args := []any{f.WorkerID}
	if f.Before != nil {
		q += ` AND (COALESCE(t.attempted_at, t.finalized_at) < ? OR (COALESCE(t.attempted_at, t.finalized_at) = ? AND t.execution_id < ?))`
		at := us(f.Before.StartedAt)
		args = append(args, at, at, f.Before.ExecutionID)
	}
	q += ` ORDER BY 5 DESC, 1 DESC LIMIT ?`
	return q, append(args, f.Limit)
}
