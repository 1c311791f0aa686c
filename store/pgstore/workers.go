package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Workers = (*Store)(nil)

func labelsJSON(m map[string]string) []byte {
	if m == nil {
		return []byte("{}")
	}
	b, _ := json.Marshal(m)
	return b
}

// RegisterWorker implements store.Workers.
func (s *Store) RegisterWorker(ctx context.Context, w store.WorkerInfo) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO backstop_workers
		(id, host, pid, queues, version, labels, remote, state, started_at, last_seen, stopped_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $8, NULL)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
			version = excluded.version, labels = excluded.labels, remote = excluded.remote, state = 'active',
			started_at = excluded.started_at, last_seen = excluded.last_seen, stopped_at = NULL`,
		w.ID, w.Host, w.PID, store.JoinQueues(w.Queues), w.Version, labelsJSON(w.Labels), w.Remote, w.StartedAt)
	if err != nil {
		return fmt.Errorf("pgstore: register worker: %w", err)
	}
	return nil
}

// SeeWorker implements store.Workers.
func (s *Store) SeeWorker(ctx context.Context, w store.WorkerInfo, now time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO backstop_workers
		(id, host, pid, queues, version, labels, remote, state, started_at, last_seen)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $8)
		ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, state = 'active', stopped_at = NULL`,
		w.ID, w.Host, w.PID, store.JoinQueues(w.Queues), w.Version, labelsJSON(w.Labels), w.Remote, now)
	if err != nil {
		return fmt.Errorf("pgstore: see worker: %w", err)
	}
	return nil
}

// TouchWorkers implements store.Workers.
func (s *Store) TouchWorkers(ctx context.Context, ids []string, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `UPDATE backstop_workers SET last_seen = $2 WHERE id = ANY($1) AND last_seen < $2`, ids, now); err != nil {
		return fmt.Errorf("pgstore: touch workers: %w", err)
	}
	return nil
}

// SetWorkerState implements store.Workers.
func (s *Store) SetWorkerState(ctx context.Context, id string, st store.WorkerState, now time.Time) error {
	var stopped *time.Time
	if st == store.WorkerStopped {
		stopped = &now
	}
	tag, err := s.pool.Exec(ctx, `UPDATE backstop_workers SET state = $2, last_seen = $3, stopped_at = $4 WHERE id = $1`,
		id, string(st), now, stopped)
	if err != nil {
		return fmt.Errorf("pgstore: worker state: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: worker %s: %w", id, store.ErrNotFound)
	}
	return nil
}

const workerCols = `id, host, pid, queues, version, labels, remote, state, started_at, last_seen, stopped_at`

func scanWorker(r pgx.Row, now time.Time, staleAfter time.Duration) (store.WorkerInfo, error) {
	var (
		w       store.WorkerInfo
		queues  string
		labels  []byte
		state   string
		stopped *time.Time
	)
	if err := r.Scan(&w.ID, &w.Host, &w.PID, &queues, &w.Version, &labels, &w.Remote, &state, &w.StartedAt, &w.LastSeen, &stopped); err != nil {
		return w, err
	}
	w.Queues = store.SplitQueues(queues)
	w.Labels = map[string]string{}
	_ = json.Unmarshal(labels, &w.Labels)
	w.StartedAt, w.LastSeen, w.StoppedAt = utc(w.StartedAt), utc(w.LastSeen), utcPtr(stopped)
	w.State = store.DeriveWorkerState(store.WorkerState(state), w.LastSeen, now, staleAfter)
	return w, nil
}

// ListWorkers implements store.Workers.
func (s *Store) ListWorkers(ctx context.Context, f store.WorkerFilter) ([]store.WorkerInfo, error) {
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	cutoff := f.Now.Add(-f.StaleAfter)
	if f.Queue != "" {
		where = append(where, "strpos(queues, "+arg(","+f.Queue+",")+") > 0")
	}
	switch f.State {
	case store.WorkerStale:
		where = append(where, "state IN ('active', 'stopping') AND last_seen < "+arg(cutoff))
	case store.WorkerActive, store.WorkerStopping:
		where = append(where, "state = "+arg(string(f.State))+" AND last_seen >= "+arg(cutoff))
	case store.WorkerStopped:
		where = append(where, "state = 'stopped'")
	}
	if f.AfterID != "" {
		where = append(where, "id > "+arg(f.AfterID))
	}
	q := `SELECT ` + workerCols + ` FROM backstop_workers`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id"
	if f.Limit > 0 {
		q += " LIMIT " + arg(f.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list workers: %w", err)
	}
	defer rows.Close()
	out := []store.WorkerInfo{}
	for rows.Next() {
		w, err := scanWorker(rows, f.Now, f.StaleAfter)
		if err != nil {
			return nil, fmt.Errorf("pgstore: list workers: %w", err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// GetWorker implements store.Workers.
func (s *Store) GetWorker(ctx context.Context, id string, now time.Time, staleAfter time.Duration) (*store.WorkerInfo, error) {
	w, err := scanWorker(s.pool.QueryRow(ctx, `SELECT `+workerCols+` FROM backstop_workers WHERE id = $1`, id), now, staleAfter)
	if isNoRows(err) {
		return nil, fmt.Errorf("pgstore: worker %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: worker %s: %w", id, err)
	}
	return &w, nil
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

// CountWorkersByState implements store.Workers.
func (s *Store) CountWorkersByState(ctx context.Context, now time.Time, staleAfter time.Duration) (map[store.WorkerState]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT state, last_seen < $1, count(*) FROM backstop_workers GROUP BY 1, 2`, now.Add(-staleAfter))
	if err != nil {
		return nil, fmt.Errorf("pgstore: count workers: %w", err)
	}
	defer rows.Close()
	out := store.NewWorkerCounts()
	for rows.Next() {
		var (
			state string
			old   bool
			n     int
		)
		if err := rows.Scan(&state, &old, &n); err != nil {
			return nil, fmt.Errorf("pgstore: count workers: %w", err)
		}
		store.AddWorkerCount(out, state, old, n)
	}
	return out, rows.Err()
}
