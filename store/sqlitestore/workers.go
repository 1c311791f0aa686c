package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Workers = (*Store)(nil)

func labelsJSON(m map[string]string) string {
	if m == nil {
		return "{}"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// RegisterWorker implements store.Workers.
func (s *Store) RegisterWorker(ctx context.Context, w store.WorkerInfo) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO backstop_workers
		(id, host, pid, queues, version, labels, remote, state, started_at, last_seen, stopped_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, NULL)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
			version = excluded.version, labels = excluded.labels, remote = excluded.remote, state = 'active',
			started_at = excluded.started_at, last_seen = excluded.last_seen, stopped_at = NULL, lost_at = NULL`,
			w.ID, w.Host, w.PID, store.JoinQueues(w.Queues), w.Version, labelsJSON(w.Labels), boolInt(w.Remote),
			us(w.StartedAt), us(w.StartedAt)); err != nil {
			return err
		}
		return insertEventsIndexed(ctx, tx, []bt.Event{store.WorkerStartedEvent(w, w.StartedAt, store.ActorFrom(ctx, ""))}, false)
	})
	if err != nil {
		return fmt.Errorf("sqlite: register worker: %w", err)
	}
	return nil
}

// inTx runs f in a write transaction.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// SeeWorker implements store.Workers.
func (s *Store) SeeWorker(ctx context.Context, w store.WorkerInfo, now time.Time) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var old string
		err := tx.QueryRowContext(ctx, `SELECT state FROM backstop_workers WHERE id = ?`, w.ID).Scan(&old)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO backstop_workers
		(id, host, pid, queues, version, labels, remote, state, started_at, last_seen)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'active', ?8, ?8)
		ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, lost_at = NULL,
			state = CASE WHEN state = 'stopped' THEN 'active' ELSE state END,
			started_at = CASE WHEN state = 'stopped' THEN excluded.started_at ELSE started_at END,
			stopped_at = CASE WHEN state = 'stopped' THEN NULL ELSE stopped_at END`,
			w.ID, w.Host, w.PID, store.JoinQueues(w.Queues), w.Version, labelsJSON(w.Labels), boolInt(w.Remote), us(now)); err != nil {
			return err
		}
		if old != "" && old != string(store.WorkerStopped) {
			return nil
		}
		info, err := scanWorker(tx.QueryRowContext(ctx, `SELECT `+workerCols+` FROM backstop_workers WHERE id = ?`, w.ID), now, time.Duration(1<<62))
		if err != nil {
			return err
		}
		return insertEventsIndexed(ctx, tx, []bt.Event{store.WorkerStartedEvent(info, now, store.ActorFrom(ctx, ""))}, false)
	})
	if err != nil {
		return fmt.Errorf("sqlite: see worker: %w", err)
	}
	return nil
}

// TouchWorkers implements store.Workers.
func (s *Store) TouchWorkers(ctx context.Context, ids []string, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	args := []any{us(now)}
	for _, id := range ids {
		args = append(args, id)
	}
	q := `UPDATE backstop_workers SET last_seen = ?1, lost_at = NULL WHERE last_seen < ?1 AND id IN (?2` +
		strings.Repeat(", ?", len(ids)-1) + `)`
	if _, err := s.w.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("sqlite: touch workers: %w", err)
	}
	return nil
}

// SetWorkerState implements store.Workers.
func (s *Store) SetWorkerState(ctx context.Context, id string, st store.WorkerState, now time.Time) error {
	var stopped any
	if st == store.WorkerStopped {
		stopped = us(now)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var (
			old, host string
			started   int64
		)
		err := tx.QueryRowContext(ctx, `SELECT state, host, started_at FROM backstop_workers WHERE id = ?`, id).Scan(&old, &host, &started)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("worker %s: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE backstop_workers SET state = ?, last_seen = ?, stopped_at = ?, lost_at = NULL WHERE id = ?`,
			string(st), us(now), stopped, id); err != nil {
			return err
		}
		if st != store.WorkerStopped || old == string(store.WorkerStopped) {
			return nil
		}
		return insertEventsIndexed(ctx, tx, []bt.Event{store.WorkerStoppedEvent(id, host, fromUS(started), now, store.ActorFrom(ctx, ""))}, false)
	})
	if err != nil {
		return fmt.Errorf("sqlite: worker state: %w", err)
	}
	return nil
}

// MarkLostWorkers implements store.Workers (one writer: the UPDATE's
// lost_at IS NULL makes the event once).
func (s *Store) MarkLostWorkers(ctx context.Context, now time.Time, staleAfter time.Duration) ([]string, error) {
	var ids []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE backstop_workers SET lost_at = ?
			WHERE state IN ('active', 'stopping') AND last_seen < ? AND lost_at IS NULL
			RETURNING id, host, last_seen`, us(now), us(now.Add(-staleAfter)))
		if err != nil {
			return err
		}
		var events []bt.Event
		for rows.Next() {
			var (
				id, host string
				seen     int64
			)
			if err := rows.Scan(&id, &host, &seen); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
			events = append(events, store.WorkerLostEvent(id, host, fromUS(seen), now, staleAfter))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return insertEventsIndexed(ctx, tx, events, false)
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: mark lost workers: %w", err)
	}
	return ids, nil
}

const workerCols = `id, host, pid, queues, version, labels, remote, state, started_at, last_seen, stopped_at`

type rowScanner interface{ Scan(...any) error }

func scanWorker(r rowScanner, now time.Time, staleAfter time.Duration) (store.WorkerInfo, error) {
	var (
		w             queuesLabels
		info          store.WorkerInfo
		remote        int
		state         string
		started, seen int64
		stopped       sql.NullInt64
	)
	if err := r.Scan(&info.ID, &info.Host, &info.PID, &w.queues, &info.Version, &w.labels, &remote, &state,
		&started, &seen, &stopped); err != nil {
		return info, err
	}
	info.Queues = store.SplitQueues(w.queues)
	info.Labels = map[string]string{}
	_ = json.Unmarshal([]byte(w.labels), &info.Labels)
	info.Remote = remote != 0
	info.StartedAt, info.LastSeen, info.StoppedAt = fromUS(started), fromUS(seen), fromNullUS(stopped)
	info.State = store.DeriveWorkerState(store.WorkerState(state), info.LastSeen, now, staleAfter)
	return info, nil
}

type queuesLabels struct{ queues, labels string }

// ListWorkers implements store.Workers.
func (s *Store) ListWorkers(ctx context.Context, f store.WorkerFilter) ([]store.WorkerInfo, error) {
	var where []string
	var args []any
	cutoff := us(f.Now.Add(-f.StaleAfter))
	if f.Queue != "" {
		where, args = append(where, "instr(queues, ?) > 0"), append(args, ","+f.Queue+",")
	}
	switch f.State {
	case store.WorkerStale:
		where, args = append(where, "state IN ('active', 'stopping') AND last_seen < ?"), append(args, cutoff)
	case store.WorkerActive, store.WorkerStopping:
		where, args = append(where, "state = ? AND last_seen >= ?"), append(args, string(f.State), cutoff)
	case store.WorkerStopped:
		where = append(where, "state = 'stopped'")
	}
	if f.AfterID != "" {
		where, args = append(where, "id > ?"), append(args, f.AfterID)
	}
	q := `SELECT ` + workerCols + ` FROM backstop_workers`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id"
	if f.Limit > 0 {
		q, args = q+" LIMIT ?", append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list workers: %w", err)
	}
	defer rows.Close()
	out := []store.WorkerInfo{}
	for rows.Next() {
		w, err := scanWorker(rows, f.Now, f.StaleAfter)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list workers: %w", err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// GetWorker implements store.Workers.
func (s *Store) GetWorker(ctx context.Context, id string, now time.Time, staleAfter time.Duration) (*store.WorkerInfo, error) {
	w, err := scanWorker(s.r.QueryRowContext(ctx, `SELECT `+workerCols+` FROM backstop_workers WHERE id = ?`, id), now, staleAfter)
	if err == sql.ErrNoRows {
		return nil, fmt.Errorf("sqlite: worker %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: worker %s: %w", id, err)
	}
	return &w, nil
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

// CountWorkersByState implements store.Workers.
func (s *Store) CountWorkersByState(ctx context.Context, now time.Time, staleAfter time.Duration) (map[store.WorkerState]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT state, last_seen < ?, count(*) FROM backstop_workers GROUP BY 1, 2`,
		us(now.Add(-staleAfter)))
	if err != nil {
		return nil, fmt.Errorf("sqlite: count workers: %w", err)
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
			return nil, fmt.Errorf("sqlite: count workers: %w", err)
		}
		store.AddWorkerCount(out, state, old, n)
	}
	return out, rows.Err()
}
