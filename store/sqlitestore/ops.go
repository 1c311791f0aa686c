package sqlitestore

import (
	"context"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// This file implements store.Ops: leadership, retention, statistics, views.

// DeleteFinished implements store.Ops.
func (s *Store) DeleteFinished(ctx context.Context, state bt.State, before time.Time, limit int) (int, error) {
	if state != bt.StateSucceeded && state != bt.StateCanceled {
		return 0, fmt.Errorf("sqlite: delete finished: state %q is not succeeded or canceled", state)
	}
	return s.deleteTasks(ctx, sqlDoomedFinished, string(state), us(before), limit)
}

// sqlDoomedFinished picks a retention batch through backstop_tasks_finished,
// oldest first, never by a scan of the table. The IN term is the index's:
// SQLite reads a partial index only when the statement repeats its WHERE
// term (a state bound as a parameter, or a state = of one of its states,
// does not imply it).
const sqlDoomedFinished = `SELECT id FROM backstop_tasks
	WHERE state IN ('succeeded', 'canceled') AND state = ? AND finalized_at < ?
	ORDER BY finalized_at LIMIT ?`

// deleteTasks deletes the tasks the query selects, with their executions,
// spilled payloads and events (events.go: deleteTaskEvents), in one
// transaction.
func (s *Store) deleteTasks(ctx context.Context, query string, args ...any) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("sqlite: retention: %w", err)
	}
	var ids []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	in := ` IN (` + placeholders(len(ids)) + `)`
	stmts := []string{`DELETE FROM backstop_executions WHERE task_id` + in, `DELETE FROM backstop_payloads WHERE task_id` + in}
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q, ids...); err != nil {
			return 0, fmt.Errorf("sqlite: retention: %w", err)
		}
	}
	if err := deleteTaskEvents(ctx, tx, ids); err != nil { // events.go
		return 0, fmt.Errorf("sqlite: retention: %w", err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM backstop_tasks WHERE id`+in, ids...)
	if err != nil {
		return 0, fmt.Errorf("sqlite: retention: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return int(n), tx.Commit()
}

// tableSizes lists the Backstop tables; their sizes come from the dbstat
// virtual table when the SQLite build has it, else they are -1 (n/a). The
// file's size is page_count × page_size either way.
func tableSizes(ctx context.Context, q sqldialect.Querier) ([]store.TableSize, int64, error) {
	var dbBytes int64
	if err := q.QueryRow(ctx, `SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`).
		Scan(&dbBytes); err != nil {
		return nil, 0, err
	}
	rows, err := q.Query(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'backstop\_%' ESCAPE '\'
		ORDER BY name`)
	if err != nil {
		return nil, 0, err
	}
	var out []store.TableSize
	for rows.Next() {
		t := store.TableSize{Bytes: -1}
		if err := rows.Scan(&t.Table); err != nil {
			rows.Close()
			return nil, 0, err
		}
		out = append(out, t)
	}
	rows.Close()
	// A table's bytes are its pages and its indexes' pages.
	sizes, err := q.Query(ctx, `SELECT m.tbl_name, sum(d.pgsize) FROM dbstat d JOIN sqlite_master m ON m.name = d.name
		GROUP BY m.tbl_name`)
	if err != nil {
		return out, dbBytes, nil // no dbstat in this build: n/a
	}
	defer sizes.Close()
	by := map[string]int64{}
	for sizes.Next() {
		var (
			name string
			n    int64
		)
		if err := sizes.Scan(&name, &n); err != nil {
			return nil, 0, err
		}
		by[name] = n
	}
	if sizes.Err() != nil {
		return out, dbBytes, nil
	}
	for i := range out {
		if n, ok := by[out[i].Table]; ok {
			out[i].Bytes = n
		}
	}
	return out, dbBytes, nil
}

// View implements store.Ops.
func (s *Store) View(ctx context.Context, v store.View, now time.Time, limit int) ([]*bt.Task, error) {
	if limit <= 0 {
		limit = 100
	}
	var (
		q    string
		args []any
	)
	switch v {
	case store.ViewPendingRetries:
		q = `SELECT ` + taskCols + ` FROM backstop_tasks WHERE state = 'scheduled' AND attempt > 0 ORDER BY run_at, id LIMIT ?`
		args = []any{limit}
	case store.ViewRetryExhausted:
		q = `SELECT ` + taskCols + ` FROM backstop_tasks WHERE state = 'dead' AND dead_reason = 'attempts_exhausted'
			ORDER BY last_seen DESC, id LIMIT ?`
		args = []any{limit}
	case store.ViewRecentFailures:
		q = `SELECT ` + taskCols + ` FROM backstop_tasks JOIN (
				SELECT task_id, max(finished_at) AS last_failure FROM backstop_executions
				WHERE outcome IN ('transient_error', 'permanent_error', 'timeout', 'lease_expired') AND finished_at >= ?
				GROUP BY task_id
			) f ON f.task_id = backstop_tasks.id
			ORDER BY f.last_failure DESC, id LIMIT ?`
		args = []any{us(now.Add(-store.RecentFailuresWindow)), limit}
	default:
		return nil, fmt.Errorf("sqlite: unknown view %q", v)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: view %s: %w", v, err)
	}
	tasks, err := scanTasks(rows)
	if err != nil {
		return nil, err
	}
	return tasks, loadSpilled(ctx, s.r, tasks)
}
