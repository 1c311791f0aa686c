package pgstore

import (
	"context"
	"encoding/json"
	"errors"
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
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_workers
		(id, host, pid, queues, version, labels, remote, state, started_at, last_seen, stopped_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $8, NULL)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
			version = excluded.version, labels = excluded.labels, remote = excluded.remote, state = 'active',
			started_at = excluded.started_at, last_seen = excluded.last_seen, stopped_at = NULL, lost_at = NULL`,
			w.ID, w.Host, w.PID, store.JoinQueues(w.Queues), w.Version, labelsJSON(w.Labels), w.Remote, w.StartedAt); err != nil {
			return err
		}
		return insertEventsScalar(ctx, pgxTx{tx}, []bt.Event{store.WorkerStartedEvent(w, w.StartedAt, store.ActorFrom(ctx, ""))})
	})
	if err != nil {
		return fmt.Errorf("pgstore: register worker: %w", err)
	}
	return nil
}

// SeeWorker implements store.Workers.
func (s *Store) SeeWorker(ctx context.Context, w store.WorkerInfo, now time.Time) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var old string
		err := tx.QueryRow(ctx, `SELECT state FROM backstop_workers WHERE id = $1 FOR UPDATE`, w.ID).Scan(&old)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			old = ""
		case err != nil:
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_workers
		(id, host, pid, queues, version, labels, remote, state, started_at, last_seen)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $8)
		ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, lost_at = NULL,
			state = CASE WHEN backstop_workers.state = 'stopped' THEN 'active' ELSE backstop_workers.state END,
			started_at = CASE WHEN backstop_workers.state = 'stopped' THEN excluded.started_at ELSE backstop_workers.started_at END,
			stopped_at = CASE WHEN backstop_workers.state = 'stopped' THEN NULL ELSE backstop_workers.stopped_at END`,
			w.ID, w.Host, w.PID, store.JoinQueues(w.Queues), w.Version, labelsJSON(w.Labels), w.Remote, now); err != nil {
			return err
		}
		if old != "" && old != string(store.WorkerStopped) {
			return nil
		}
		var info workerRow
		if err := tx.QueryRow(ctx, `SELECT `+workerCols+` FROM backstop_workers WHERE id = $1`, w.ID).Scan(scanWorkerDest(&info)...); err != nil {
			return err
		}
		return insertEventsScalar(ctx, pgxTx{tx}, []bt.Event{store.WorkerStartedEvent(info.fields(), now, store.ActorFrom(ctx, ""))})
	})
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
	if _, err := s.pool.Exec(ctx, `UPDATE backstop_workers SET last_seen = $2, lost_at = NULL WHERE id = ANY($1) AND last_seen < $2`, ids, now); err != nil {
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
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			old, host string
			started   time.Time
		)
		err := tx.QueryRow(ctx, `SELECT state, host, started_at FROM backstop_workers WHERE id = $1 FOR UPDATE`, id).Scan(&old, &host, &started)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("worker %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE backstop_workers SET state = $2, last_seen = $3, stopped_at = $4, lost_at = NULL WHERE id = $1`,
			id, string(st), now, stopped); err != nil {
			return err
		}
		if st != store.WorkerStopped || old == string(store.WorkerStopped) {
			return nil
		}
		return insertEventsScalar(ctx, pgxTx{tx}, []bt.Event{store.WorkerStoppedEvent(id, host, utc(started), now, store.ActorFrom(ctx, ""))})
	})
	if err != nil {
		return fmt.Errorf("pgstore: worker state: %w", err)
	}
	return nil
}

// MarkLostWorkers implements store.Workers. A second maintainer's UPDATE
// waits for the first one's row locks and then finds lost_at set.
func (s *Store) MarkLostWorkers(ctx context.Context, now time.Time, staleAfter time.Duration) ([]string, error) {
	var ids []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rs, err := tx.Query(ctx, `UPDATE backstop_workers SET lost_at = $1
			WHERE state IN ('active', 'stopping') AND last_seen < $2 AND lost_at IS NULL
			RETURNING id, host, last_seen`, now, now.Add(-staleAfter))
		if err != nil {
			return err
		}
		var events []bt.Event
		for rs.Next() {
			var (
				id, host string
				seen     time.Time
			)
			if err := rs.Scan(&id, &host, &seen); err != nil {
				rs.Close()
				return err
			}
			ids = append(ids, id)
			events = append(events, store.WorkerLostEvent(id, host, utc(seen), now, staleAfter))
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return err
		}
		return insertEventsScalar(ctx, pgxTx{tx}, events)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: mark lost workers: %w", err)
	}
	return ids, nil
}

const workerCols = `id, host, pid, queues, version, labels, remote, state, started_at, last_seen, stopped_at`

// workerRow is a registry row as scanned.
type workerRow struct {
	w       store.WorkerInfo
	queues  string
	labels  []byte
	state   string
	stopped *time.Time
}

func scanWorkerDest(r *workerRow) []any {
	return []any{&r.w.ID, &r.w.Host, &r.w.PID, &r.queues, &r.w.Version, &r.labels, &r.w.Remote, &r.state, &r.w.StartedAt, &r.w.LastSeen, &r.stopped}
}

// fields is the row as a WorkerInfo, its state as stored.
func (r *workerRow) fields() store.WorkerInfo {
	w := r.w
	w.Queues = store.SplitQueues(r.queues)
	w.Labels = map[string]string{}
	_ = json.Unmarshal(r.labels, &w.Labels)
	w.StartedAt, w.LastSeen, w.StoppedAt = utc(w.StartedAt), utc(w.LastSeen), utcPtr(r.stopped)
	w.State = store.WorkerState(r.state)
	return w
}

func scanWorker(r pgx.Row, now time.Time, staleAfter time.Duration) (store.WorkerInfo, error) {
	var row workerRow
	if err := r.Scan(scanWorkerDest(&row)...); err != nil {
		return row.w, err
	}
	w := row.fields()
	w.State = store.DeriveWorkerState(w.State, w.LastSeen, now, staleAfter)
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
