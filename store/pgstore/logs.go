package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

var _ store.Logs = (*Store)(nil)

func logColumns(lines []store.LogLine) (exec, task, stream, line []string, seq []int32, at []time.Time) {
	for _, l := range lines {
		exec, task, stream, line = append(exec, l.ExecutionID), append(task, l.TaskID), append(stream, l.Stream), append(line, l.Line)
		seq, at = append(seq, int32(l.Seq)), append(at, l.At)
	}
	return
}

// AppendLogs implements store.Logs: one statement per batch.
func (s *Store) AppendLogs(ctx context.Context, lines []store.LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	exec, task, stream, line, seq, at := logColumns(lines)
	_, err := s.pool.Exec(ctx, `INSERT INTO backstop_execution_logs (execution_id, seq, task_id, at, stream, line)
		SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::timestamptz[], $5::text[], $6::text[])
		ON CONFLICT DO NOTHING`, exec, seq, task, at, stream, line)
	if err != nil {
		return fmt.Errorf("pgstore: append logs: %w", err)
	}
	return nil
}

// AppendLeasedLogs implements store.Logs: the lease check and the insert
// are one statement.
func (s *Store) AppendLeasedLogs(ctx context.Context, taskID, executionID string, lines []store.LogLine) (bool, error) {
	_, _, stream, line, seq, at := logColumns(lines)
	var ok bool
	err := s.pool.QueryRow(ctx, `WITH lease AS (
		SELECT 1 FROM backstop_tasks WHERE id = $1 AND execution_id = $2 AND state = 'running'
	), ins AS (
		INSERT INTO backstop_execution_logs (execution_id, seq, task_id, at, stream, line)
		SELECT $2, u.seq, $1, u.at, u.stream, u.line
		FROM unnest($3::int[], $4::timestamptz[], $5::text[], $6::text[]) AS u(seq, at, stream, line)
		WHERE EXISTS (SELECT 1 FROM lease)
		ON CONFLICT DO NOTHING
	)
	SELECT EXISTS (SELECT 1 FROM lease)`, taskID, executionID, seq, at, stream, line).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("pgstore: append logs: %w", err)
	}
	return ok, nil
}
