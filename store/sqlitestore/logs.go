package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/backstophq/backstop/store"
)

var _ store.Logs = (*Store)(nil)

func insertLogs(ctx context.Context, tx *sql.Tx, lines []store.LogLine) error {
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO backstop_execution_logs (execution_id, seq, task_id, at, stream, line)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, l := range lines {
		if _, err := stmt.ExecContext(ctx, l.ExecutionID, l.Seq, l.TaskID, us(l.At), l.Stream, l.Line); err != nil {
			return err
		}
	}
	return nil
}

// AppendLogs implements store.Logs: one transaction per batch.
func (s *Store) AppendLogs(ctx context.Context, lines []store.LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: append logs: %w", err)
	}
	defer tx.Rollback()
	if err := insertLogs(ctx, tx, lines); err != nil {
		return fmt.Errorf("sqlite: append logs: %w", err)
	}
	return tx.Commit()
}

// AppendLeasedLogs implements store.Logs: the lease check and the inserts
// are one (writer) transaction.
func (s *Store) AppendLeasedLogs(ctx context.Context, taskID, executionID string, lines []store.LogLine) (bool, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("sqlite: append logs: %w", err)
	}
	defer tx.Rollback()
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM backstop_tasks WHERE id = ? AND execution_id = ? AND state = 'running'`,
		taskID, executionID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sqlite: append logs: %w", err)
	}
	for i := range lines {
		lines[i].TaskID, lines[i].ExecutionID = taskID, executionID
	}
	if err := insertLogs(ctx, tx, lines); err != nil {
		return false, fmt.Errorf("sqlite: append logs: %w", err)
	}
	return true, tx.Commit()
}
