package sqldialect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is the registry of store.Workers (WorkerExecutions, which
// reads the executions' own columns, stays in each driver).

func labelsJSON(m map[string]string) string {
	if m == nil {
		return "{}"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// RegisterWorker implements store.Workers.
func (p *Procedures) RegisterWorker(ctx context.Context, w store.WorkerInfo) error {
	d, db := p.dialect, p.writer
	err := InTx(ctx, db, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_workers
		(id, host, pid, queues, version, labels, remote, state, started_at, last_seen, stopped_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $8, NULL)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
			version = excluded.version, labels = excluded.labels, remote = excluded.remote, state = 'active',
			started_at = excluded.started_at, last_seen = excluded.last_seen, stopped_at = NULL, lost_at = NULL`,
			w.ID, w.Host, w.PID, store.JoinQueues(w.Queues), w.Version, labelsJSON(w.Labels), w.Remote, w.StartedAt); err != nil {
			return err
		}
		return d.WorkerEvents(ctx, tx, []bt.Event{store.WorkerStartedEvent(w, w.StartedAt, store.ActorFrom(ctx, ""))})
	})
	if err != nil {
		return fmt.Errorf("%s: register worker: %w", d.Prefix, err)
	}
	return nil
}

// SeeWorker implements store.Workers.
func (p *Procedures) SeeWorker(ctx context.Context, w store.WorkerInfo, now time.Time) error {
	d, db := p.dialect, p.writer
	err := InTx(ctx, db, func(tx Tx) error {
		var old string
		err := tx.QueryRow(ctx, `SELECT state FROM backstop_workers WHERE id = $1`+d.ForUpdate, w.ID).Scan(&old)
		if err != nil && !errors.Is(err, ErrNoRows) {
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
		if err := tx.QueryRow(ctx, `SELECT `+workerCols+` FROM backstop_workers WHERE id = $1`, w.ID).Scan(info.dest()...); err != nil {
			return err
		}
		return d.WorkerEvents(ctx, tx, []bt.Event{store.WorkerStartedEvent(info.fields(), now, store.ActorFrom(ctx, ""))})
	})
	if err != nil {
		return fmt.Errorf("%s: see worker: %w", d.Prefix, err)
	}
	return nil
}

// TouchWorkers implements store.Workers.
func (p *Procedures) TouchWorkers(ctx context.Context, ids []string, now time.Time) error {
	d, q := p.dialect, p.writer
	if len(ids) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, `UPDATE backstop_workers SET last_seen = $2, lost_at = NULL WHERE id `+d.InText("$1")+` AND last_seen < $2`,
		d.TextList(ids), now); err != nil {
		return fmt.Errorf("%s: touch workers: %w", d.Prefix, err)
	}
	return nil
}

// SetWorkerState implements store.Workers.
func (p *Procedures) SetWorkerState(ctx context.Context, id string, st store.WorkerState, now time.Time) error {
	d, db := p.dialect, p.writer
	var stopped *time.Time
	if st == store.WorkerStopped {
		stopped = &now
	}
	err := InTx(ctx, db, func(tx Tx) error {
		var (
			old, host string
			started   time.Time
		)
		err := tx.QueryRow(ctx, `SELECT state, host, started_at FROM backstop_workers WHERE id = $1`+d.ForUpdate, id).Scan(&old, &host, &started)
		if errors.Is(err, ErrNoRows) {
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
		return d.WorkerEvents(ctx, tx, []bt.Event{store.WorkerStoppedEvent(id, host, started, now, store.ActorFrom(ctx, ""))})
	})
	if err != nil {
		return fmt.Errorf("%s: worker state: %w", d.Prefix, err)
	}
	return nil
}

// MarkLostWorkers implements store.Workers. The UPDATE's lost_at IS NULL
// makes the event once: on PostgreSQL a second maintainer's UPDATE waits
// for the first one's row locks and then finds lost_at set; SQLite has one
// writer.
func (p *Procedures) MarkLostWorkers(ctx context.Context, now time.Time, staleAfter time.Duration) ([]string, error) {
	d, db := p.dialect, p.writer
	var ids []string
	err := InTx(ctx, db, func(tx Tx) error {
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
			events = append(events, store.WorkerLostEvent(id, host, seen, now, staleAfter))
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return err
		}
		return d.WorkerEvents(ctx, tx, events)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: mark lost workers: %w", d.Prefix, err)
	}
	return ids, nil
}

const workerCols = `id, host, pid, queues, version, labels, remote, state, started_at, last_seen, stopped_at`

// workerRow is a registry row as scanned.
type workerRow struct {
	w      store.WorkerInfo
	queues string
	labels []byte
	state  string
}

func (r *workerRow) dest() []any {
	return []any{&r.w.ID, &r.w.Host, &r.w.PID, &r.queues, &r.w.Version, &r.labels, &r.w.Remote, &r.state,
		&r.w.StartedAt, &r.w.LastSeen, &r.w.StoppedAt}
}

// fields is the row as a WorkerInfo, its state as stored.
func (r *workerRow) fields() store.WorkerInfo {
	w := r.w
	w.Queues = store.SplitQueues(r.queues)
	w.Labels = map[string]string{}
	_ = json.Unmarshal(r.labels, &w.Labels)
	w.State = store.WorkerState(r.state)
	return w
}

func scanWorker(r Row, now time.Time, staleAfter time.Duration) (store.WorkerInfo, error) {
	var row workerRow
	if err := r.Scan(row.dest()...); err != nil {
		return row.w, err
	}
	w := row.fields()
	w.State = store.DeriveWorkerState(w.State, w.LastSeen, now, staleAfter)
	return w, nil
}

// ListWorkers implements store.Workers.
func (p *Procedures) ListWorkers(ctx context.Context, f store.WorkerFilter) ([]store.WorkerInfo, error) {
	d, q := p.dialect, p.reader
	var where []string
	var a args
	cutoff := f.Now.Add(-f.StaleAfter)
	if f.Queue != "" {
		where = append(where, d.Strpos+"(queues, "+a.add(","+f.Queue+",")+") > 0")
	}
	switch f.State {
	case store.WorkerStale:
		where = append(where, "state IN ('active', 'stopping') AND last_seen < "+a.add(cutoff))
	case store.WorkerActive, store.WorkerStopping:
		where = append(where, "state = "+a.add(string(f.State))+" AND last_seen >= "+a.add(cutoff))
	case store.WorkerStopped:
		where = append(where, "state = 'stopped'")
	}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		where = append(where, d.JSONText("labels", a.add(d.JSONKey(k)))+" = "+a.add(f.Labels[k]))
	}
	if f.AfterID != "" {
		where = append(where, "id > "+a.add(f.AfterID))
	}
	sql := `SELECT ` + workerCols + ` FROM backstop_workers`
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY id"
	if f.Limit > 0 {
		sql += " LIMIT " + a.add(f.Limit)
	}
	rows, err := q.Query(ctx, sql, a...)
	if err != nil {
		return nil, fmt.Errorf("%s: list workers: %w", d.Prefix, err)
	}
	defer rows.Close()
	out := []store.WorkerInfo{}
	for rows.Next() {
		w, err := scanWorker(rows, f.Now, f.StaleAfter)
		if err != nil {
			return nil, fmt.Errorf("%s: list workers: %w", d.Prefix, err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list workers: %w", d.Prefix, err)
	}
	rows.Close()
	if err := p.currentExecutions(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// currentExecutions fills each worker's CurrentExecutionIDs: the
// executions of the running tasks whose lease it holds.
func (p *Procedures) currentExecutions(ctx context.Context, ws []store.WorkerInfo) error {
	d, q := p.dialect, p.reader
	idx := make(map[string]int, len(ws))
	var a args
	ph := make([]string, 0, len(ws))
	for i := range ws {
		ws[i].CurrentExecutionIDs = []string{}
		idx[ws[i].ID] = i
		ph = append(ph, a.add(ws[i].ID))
	}
	if len(ws) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, `SELECT worker_id, execution_id FROM backstop_tasks
		WHERE state = 'running' AND execution_id IS NOT NULL AND worker_id IN (`+strings.Join(ph, ", ")+`)
		ORDER BY execution_id`, a...)
	if err != nil {
		return fmt.Errorf("%s: current executions: %w", d.Prefix, err)
	}
	defer rows.Close()
	for rows.Next() {
		var w, ex string
		if err := rows.Scan(&w, &ex); err != nil {
			return fmt.Errorf("%s: current executions: %w", d.Prefix, err)
		}
		if i, ok := idx[w]; ok {
			ws[i].CurrentExecutionIDs = append(ws[i].CurrentExecutionIDs, ex)
		}
	}
	return rows.Err()
}

// GetWorker implements store.Workers.
func (p *Procedures) GetWorker(ctx context.Context, id string, now time.Time, staleAfter time.Duration) (*store.WorkerInfo, error) {
	d, q := p.dialect, p.reader
	w, err := scanWorker(q.QueryRow(ctx, `SELECT `+workerCols+` FROM backstop_workers WHERE id = $1`, id), now, staleAfter)
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("%s: worker %s: %w", d.Prefix, id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: worker %s: %w", d.Prefix, id, err)
	}
	ws := []store.WorkerInfo{w}
	if err := p.currentExecutions(ctx, ws); err != nil {
		return nil, err
	}
	return &ws[0], nil
}

// CountWorkersByState implements store.Workers.
func (p *Procedures) CountWorkersByState(ctx context.Context, now time.Time, staleAfter time.Duration) (map[store.WorkerState]int, error) {
	d, q := p.dialect, p.reader
	rows, err := q.Query(ctx, `SELECT state, last_seen < $1, count(*) FROM backstop_workers GROUP BY 1, 2`, now.Add(-staleAfter))
	if err != nil {
		return nil, fmt.Errorf("%s: count workers: %w", d.Prefix, err)
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
			return nil, fmt.Errorf("%s: count workers: %w", d.Prefix, err)
		}
		store.AddWorkerCount(out, state, old, n)
	}
	return out, rows.Err()
}
