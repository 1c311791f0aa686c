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

// This file is the SQLite side of store.DLQ. Every write runs on the single
// writer connection, whose transactions begin IMMEDIATE: the row a replay
// reads is locked against every other writer until it commits.

func (s *Store) AppendEvents(ctx context.Context, events []bt.Event) error {
	if len(events) == 0 {
		return nil
	}
	return insertEvents(ctx, s.w, events)
}

func (s *Store) Events(ctx context.Context, taskID string) ([]bt.Event, error) {
	return taskEvents(ctx, s.r, taskID) // events.go
}

// replaySet is what a replay in place sets (after state, run_at, keep
// attempts, now).
const replaySet = `state = ?, run_at = ?, attempt = CASE WHEN ? THEN attempt ELSE 0 END,
	lease_expires_at = NULL, last_error = NULL, cancel_requested_at = NULL, finalized_at = NULL,
	worker_id = NULL, execution_id = NULL, attempted_at = NULL, dlq_status = NULL,
	replay_count = replay_count + 1, updated_at = ?`

func conflict(t *bt.Task, cause error) error {
	return fmt.Errorf("%w: replaying %s would break a uniqueness rule (a live task holds idempotency key %q, "+
		"or a waiting %s task holds merge key %q): %v", store.ErrConflict, t.ID, t.IdempotencyKey, t.Kind, t.MergeKey, cause)
}

func (s *Store) Replay(ctx context.Context, id string, plan func(*bt.Task) (*store.ReplayPlan, error)) (*bt.Task, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck
	t, err := getTask(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	p, err := plan(t)
	if err != nil || p == nil {
		return nil, err
	}
	target := id
	if p.NewID == "" {
		if _, err := tx.ExecContext(ctx, `UPDATE backstop_tasks SET `+replaySet+` WHERE id = ?`,
			string(p.State), us(p.RunAt), p.KeepAttempts, us(p.Now), id); err != nil {
			if isUnique(err) {
				return nil, conflict(t, err)
			}
			return nil, err
		}
	} else {
		target = p.NewID
		_, err := tx.ExecContext(ctx, `INSERT INTO backstop_tasks (id, queue, kind, state, priority, attempt, max_attempts,
			payload, payload_size, payload_spilled, attributes, run_at, created_at, updated_at, timeout_us, deadline,
			retry_policy, idempotency_key, merge_key, merge_count, progress_total, progress_completed, complexity,
			trace_parent, replayed_from)
			SELECT ?, queue, kind, ?, priority, CASE WHEN ? THEN attempt ELSE 0 END, max_attempts, payload, payload_size,
			payload_spilled, attributes, ?, ?, ?, timeout_us, deadline, retry_policy, idempotency_key, merge_key,
			merge_count, progress_total, progress_completed, complexity, trace_parent, id
			FROM backstop_tasks WHERE id = ?`,
			p.NewID, string(p.State), p.KeepAttempts, us(p.RunAt), us(p.Now), us(p.Now), id)
		if err != nil {
			if isUnique(err) {
				var one int
				if tx.QueryRowContext(ctx, `SELECT 1 FROM backstop_tasks WHERE id = ?`, p.NewID).Scan(&one) == nil {
					return nil, fmt.Errorf("%w: a task with id %q already exists", store.ErrConflict, p.NewID)
				}
				return nil, conflict(t, err)
			}
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO backstop_payloads (task_id, data)
			SELECT ?, data FROM backstop_payloads WHERE task_id = ?`, p.NewID, id); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE backstop_tasks SET dlq_status = 'replayed',
			replay_count = replay_count + 1, updated_at = ? WHERE id = ?`, us(p.Now), id); err != nil {
			return nil, err
		}
	}
	if p.NewID != "" {
		if err := copyOrdering(ctx, tx, p.NewID, id); err != nil { // ordering.go
			return nil, err
		}
	}
	if err := replayOrdering(ctx, tx, []any{target}); err != nil {
		return nil, err
	}
	if p.Payload != nil {
		if err := setPayload(ctx, tx, target, p.Payload, p.InlineLimit); err != nil {
			return nil, err
		}
	}
	if err := insertEvents(ctx, tx, p.Events); err != nil {
		return nil, err
	}
	if p.RedriveID != "" {
		if _, err := tx.ExecContext(ctx, `UPDATE backstop_redrives SET replayed = replayed + 1, cursor = ? WHERE id = ?`,
			id, p.RedriveID); err != nil {
			return nil, err
		}
	}
	out, err := getTask(ctx, tx, target)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	if out.State == bt.StatePending {
		s.hub.notify(map[string]struct{}{out.Queue: {}})
	}
	return out, nil
}

// setPayload stores a new payload for id, inline or spilled.
func setPayload(ctx context.Context, q querier, id string, payload json.RawMessage, limit int) error {
	spilled := limit > 0 && len(payload) > limit
	var inline any
	if !spilled {
		inline = []byte(payload)
	}
	if _, err := q.ExecContext(ctx, `UPDATE backstop_tasks SET payload = ?, payload_size = ?, payload_spilled = ? WHERE id = ?`,
		inline, len(payload), spilled, id); err != nil {
		return err
	}
	if spilled {
		_, err := q.ExecContext(ctx, `INSERT INTO backstop_payloads (task_id, data) VALUES (?, ?)
			ON CONFLICT (task_id) DO UPDATE SET data = excluded.data`, id, []byte(payload))
		return err
	}
	_, err := q.ExecContext(ctx, `DELETE FROM backstop_payloads WHERE task_id = ?`, id)
	return err
}

// openDLQWhere selects open dead letters matching f, last seen at or before
// snapshot, after the cursor.
func openDLQWhere(f store.ListFilter, snapshot time.Time, after string) (string, []any) {
	f.States, f.DLQStatuses = []bt.State{bt.StateDead}, []bt.DLQStatus{bt.DLQOpen}
	where, args := listWhere(f)
	where, args = append(where, "last_seen <= ?"), append(args, us(snapshot))
	if after != "" {
		where, args = append(where, "id > ?"), append(args, after)
	}
	return strings.Join(where, " AND "), args
}

func (s *Store) RedriveBatch(ctx context.Context, b store.RedriveBatch) (store.RedriveBatchResult, error) {
	var res store.RedriveBatchResult
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return res, err
	}
	defer tx.Rollback() //nolint:errcheck
	where, args := openDLQWhere(b.Filter, b.Snapshot, b.AfterID)
	rows, err := tx.QueryContext(ctx, `SELECT id FROM backstop_tasks WHERE `+where+` ORDER BY id LIMIT ?`, append(args, b.Limit)...)
	if err != nil {
		return res, err
	}
	var ids []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return res, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	if len(ids) == 0 {
		return res, nil
	}
	res.LastID = ids[len(ids)-1].(string)
	set := []any{string(b.State), us(b.RunAt), b.KeepAttempts, us(b.Now)}
	var replayed []store.Redriven
	scan := func(r *sql.Rows) error {
		defer r.Close()
		for r.Next() {
			var d store.Redriven
			if err := r.Scan(&d.ID, &d.Queue, &d.Kind, &d.ReplayCount); err != nil {
				return err
			}
			replayed = append(replayed, d)
		}
		return r.Err()
	}
	r, err := tx.QueryContext(ctx, `UPDATE backstop_tasks SET `+replaySet+` WHERE id IN (`+placeholders(len(ids))+`)
		RETURNING id, queue, kind, replay_count`, append(set, ids...)...)
	if err == nil {
		err = scan(r)
	}
	if err != nil && isUnique(err) {
		// Some row breaks a uniqueness rule: replay one by one, skipping those.
		replayed = nil
		for _, id := range ids {
			r, err := tx.QueryContext(ctx, `UPDATE backstop_tasks SET `+replaySet+` WHERE id = ?
				RETURNING id, queue, kind, replay_count`, append(set, id)...)
			if err == nil {
				err = scan(r)
			}
			if err != nil && isUnique(err) {
				res.Conflicts = append(res.Conflicts, id.(string))
				continue
			}
			if err != nil {
				return res, err
			}
		}
	} else if err != nil {
		return res, err
	}
	woke := map[string]struct{}{}
	rids := make([]any, len(replayed))
	for i, d := range replayed {
		woke[d.Queue] = struct{}{}
		rids[i] = d.ID
	}
	if err := replayOrdering(ctx, tx, rids); err != nil { // ordering.go
		return res, err
	}
	events := store.RedriveEvents(b, replayed, res.Conflicts)
	if err := insertEvents(ctx, tx, events); err != nil {
		return res, err
	}
	res.Replayed = len(replayed)
	if b.RedriveID != "" {
		if _, err := tx.ExecContext(ctx, `UPDATE backstop_redrives SET cursor = ?, replayed = replayed + ?, failed = failed + ?
			WHERE id = ?`, res.LastID, res.Replayed, len(res.Conflicts), b.RedriveID); err != nil {
			return res, err
		}
	}
	if err := tx.Commit(); err != nil {
		return res, err
	}
	if b.State == bt.StatePending {
		s.hub.notify(woke)
	}
	return res, nil
}

func (s *Store) SetDLQStatus(ctx context.Context, c store.DLQStatusChange) (*bt.Task, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck
	res, err := tx.ExecContext(ctx, `UPDATE backstop_tasks SET dlq_status = ?, updated_at = ?
		WHERE id = ? AND state = 'dead' AND dlq_status = 'open'`, string(c.Status), us(c.Now), c.ID)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, fmt.Errorf("task %q is not an open dead letter: %w", c.ID, store.ErrNotFound)
	}
	t, err := getTask(ctx, tx, c.ID)
	if err != nil {
		return nil, err
	}
	ev := c.Event
	ev.Queue, ev.Kind = t.Queue, t.Kind
	if err := insertEvents(ctx, tx, []bt.Event{ev}); err != nil {
		return nil, err
	}
	return t, tx.Commit()
}

func (s *Store) PurgeDLQ(ctx context.Context, p store.PurgeParams) (int, error) {
	if len(p.Statuses) == 0 {
		return 0, nil
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 1000
	}
	sts := make([]any, len(p.Statuses))
	for i, st := range p.Statuses {
		sts[i] = string(st)
	}
	if p.DryRun {
		var n int
		err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM backstop_tasks
		WHERE state = 'dead' AND dlq_status IN (`+placeholders(len(sts))+`) AND updated_at < ?`,
			append(append([]any{}, sts...), us(p.Before))...).Scan(&n)
		return n, err
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := s.purgeBatch(ctx, sts, p.Before, limit)
		total += n
		if err != nil || n < limit {
			return total, err
		}
	}
}

func (s *Store) purgeBatch(ctx context.Context, sts []any, before time.Time, limit int) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck
	rows, err := tx.QueryContext(ctx, `SELECT id FROM backstop_tasks
		WHERE state = 'dead' AND dlq_status IN (`+placeholders(len(sts))+`) AND updated_at < ? ORDER BY id LIMIT ?`,
		append(append([]any{}, sts...), us(before), limit)...)
	if err != nil {
		return 0, err
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
	if len(ids) > 0 {
		in := ` IN (` + placeholders(len(ids)) + `)`
		for _, q := range []string{`DELETE FROM backstop_executions WHERE task_id` + in,
			`DELETE FROM backstop_payloads WHERE task_id` + in} {
			if _, err := tx.ExecContext(ctx, q, ids...); err != nil {
				return 0, err
			}
		}
		// Events first: deleteTaskEvents finds them through the task rows.
		if err := deleteTaskEvents(ctx, tx, ids); err != nil { // events.go
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM backstop_tasks WHERE id`+in, ids...); err != nil {
			return 0, err
		}
	}
	return len(ids), tx.Commit()
}

func (s *Store) StartRedrive(ctx context.Context, r store.Redrive) (store.Redrive, bool, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return r, false, err
	}
	defer tx.Rollback() //nolint:errcheck
	var (
		got               store.Redrive
		filter            string
		snapshot, started int64
	)
	err = tx.QueryRowContext(ctx, `SELECT id, filter, snapshot, cursor, replayed, failed, status, started_at
		FROM backstop_redrives WHERE filter_key = ? AND status = 'running' ORDER BY started_at LIMIT 1`, r.FilterKey).
		Scan(&got.ID, &filter, &snapshot, &got.Cursor, &got.Replayed, &got.Failed, &got.Status, &started)
	if err == nil {
		got.FilterKey, got.Filter = r.FilterKey, json.RawMessage(filter)
		got.Snapshot, got.StartedAt = fromUS(snapshot), fromUS(started)
		return got, true, tx.Commit()
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return r, false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO backstop_redrives (id, filter_key, filter, snapshot, cursor, status, started_at)
		VALUES (?, ?, ?, ?, '', 'running', ?)`, r.ID, r.FilterKey, string(r.Filter), us(r.Snapshot), us(r.StartedAt)); err != nil {
		return r, false, err
	}
	r.Status = "running"
	return r, false, tx.Commit()
}

func (s *Store) AdvanceRedrive(ctx context.Context, id, cursor string, replayed, failed int) error {
	_, err := s.w.ExecContext(ctx, `UPDATE backstop_redrives SET cursor = ?, replayed = replayed + ?, failed = failed + ?
		WHERE id = ?`, cursor, replayed, failed, id)
	return err
}

func (s *Store) FinishRedrive(ctx context.Context, id, status string, at time.Time) error {
	_, err := s.w.ExecContext(ctx, `UPDATE backstop_redrives SET status = ?, finished_at = ? WHERE id = ?`, status, us(at), id)
	return err
}

func (s *Store) CountRedrive(ctx context.Context, b store.RedriveBatch) (int, error) {
	where, args := openDLQWhere(b.Filter, b.Snapshot, b.AfterID)
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM backstop_tasks WHERE `+where, args...).Scan(&n)
	return n, err
}
