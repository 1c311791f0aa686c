package sqldialect

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is store.DLQ's single-task and bookkeeping procedures: a
// replay, a status change, the redrive records. Bulk redrive, purge and
// the redrive count stay in each driver (PostgreSQL's run as one
// statement each).

// ReplaySetSQL is what a replay in place sets: $1 state, $2 run_at, $3
// keep attempts, $4 now (PostgreSQL's bulk redrive uses it too).
const ReplaySetSQL = `state = $1, run_at = $2, attempt = CASE WHEN $3 THEN attempt ELSE 0 END,
	lease_expires_at = NULL, last_error = NULL, cancel_requested_at = NULL, finalized_at = NULL,
	worker_id = NULL, execution_id = NULL, attempted_at = NULL, dlq_status = NULL,
	replay_count = replay_count + 1, updated_at = $4`

// ReplayConflict is the error of a replay that would break a uniqueness
// rule of a live task.
func ReplayConflict(t *bt.Task, cause error) error {
	return fmt.Errorf("%w: replaying %s would break a uniqueness rule (a live task holds idempotency key %q, "+
		"or a waiting %s task holds merge key %q): %v", store.ErrConflict, t.ID, t.IdempotencyKey, t.Kind, t.MergeKey, cause)
}

// Replay implements store.DLQ: the row is locked (FOR UPDATE; SQLite's
// writer began IMMEDIATE), so two concurrent replays of one id move it
// exactly once.
func (p *Procedures) Replay(ctx context.Context, id string, plan func(*bt.Task) (*store.ReplayPlan, error)) (*bt.Task, error) {
	d, db := p.dialect, p.writer
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: replay: %w", d.Prefix, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	t, err := d.GetTask(ctx, tx, id, true)
	if err != nil {
		return nil, err
	}
	rp, err := plan(t)
	if err != nil || rp == nil {
		return nil, err
	}
	target := id
	if rp.NewID == "" {
		if _, err := tx.Exec(ctx, `UPDATE backstop_tasks SET `+ReplaySetSQL+` WHERE id = $5`,
			string(rp.State), rp.RunAt, rp.KeepAttempts, rp.Now, id); err != nil {
			if d.IsUnique(err) {
				return nil, ReplayConflict(t, err)
			}
			return nil, fmt.Errorf("%s: replay %s: %w", d.Prefix, id, err)
		}
	} else {
		target = rp.NewID
		_, err := tx.Exec(ctx, `INSERT INTO backstop_tasks (id, queue, kind, state, priority, attempt, max_attempts,
			payload, payload_size, payload_spilled, attributes, run_at, created_at, updated_at, timeout_us, deadline,
			retry_policy, idempotency_key, merge_key, merge_count, progress_total, progress_completed, complexity,
			trace_parent, replayed_from)
			SELECT $1, queue, kind, $2, priority, CASE WHEN $3 THEN attempt ELSE 0 END, max_attempts, payload, payload_size,
			payload_spilled, attributes, $4, $5, $5, timeout_us, deadline, retry_policy, idempotency_key, merge_key,
			merge_count, progress_total, progress_completed, complexity, trace_parent, id
			FROM backstop_tasks WHERE id = $6`,
			rp.NewID, string(rp.State), rp.KeepAttempts, rp.RunAt, rp.Now, id)
		if err != nil {
			if d.IsUnique(err) {
				if d.DuplicateTaskID(ctx, tx, err, rp.NewID) {
					return nil, fmt.Errorf("%w: a task with id %q already exists", store.ErrConflict, rp.NewID)
				}
				return nil, ReplayConflict(t, err)
			}
			return nil, fmt.Errorf("%s: replay %s: %w", d.Prefix, id, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_payloads (task_id, data)
			SELECT $1, data FROM backstop_payloads WHERE task_id = $2`, rp.NewID, id); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `UPDATE backstop_tasks SET dlq_status = 'replayed',
			replay_count = replay_count + 1, updated_at = $1 WHERE id = $2`, rp.Now, id); err != nil {
			return nil, err
		}
		if err := copyOrdering(ctx, tx, rp.NewID, id); err != nil {
			return nil, err
		}
	}
	if err := d.ReplayOrdering(ctx, tx, []string{target}); err != nil {
		return nil, err
	}
	if rp.Payload != nil {
		if err := d.SetPayload(ctx, tx, target, rp.Payload, rp.InlineLimit); err != nil {
			return nil, err
		}
	}
	if err := d.TaskEvents(ctx, tx, rp.Events); err != nil {
		return nil, err
	}
	if rp.RedriveID != "" {
		if _, err := tx.Exec(ctx, `UPDATE backstop_redrives SET replayed = replayed + 1, cursor = $1 WHERE id = $2`,
			id, rp.RedriveID); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, UpsertRedriveItemSQL, rp.RedriveID, id, store.OutcomeReplayed, "", rp.Now); err != nil {
			return nil, err
		}
	}
	out, err := d.GetTask(ctx, tx, target, false)
	if err != nil {
		return nil, err
	}
	if out.State == bt.StatePending {
		if err := tx.Wake(ctx, out.Queue); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("%s: replay %s: commit: %w", d.Prefix, id, err)
	}
	return out, nil
}

// SetDLQStatus implements store.DLQ.
func (p *Procedures) SetDLQStatus(ctx context.Context, c store.DLQStatusChange) (*bt.Task, error) {
	tx, err := p.writer.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	t, err := SetDLQStatusIn(ctx, p.dialect, tx, c)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("task %q is not an open dead letter: %w", c.ID, store.ErrNotFound)
	}
	return t, tx.Commit(ctx)
}

// SetDLQStatusIn moves an open dead letter to c.Status and writes c.Event
// in tx, and returns the task; a task that is not an open dead letter is
// left alone (nil, nil).
func SetDLQStatusIn(ctx context.Context, d *Dialect, tx Tx, c store.DLQStatusChange) (*bt.Task, error) {
	n, err := tx.Exec(ctx, `UPDATE backstop_tasks SET dlq_status = $1, updated_at = $2
		WHERE id = $3 AND state = 'dead' AND dlq_status = 'open'`, string(c.Status), c.Now, c.ID)
	if err != nil || n == 0 {
		return nil, err
	}
	t, err := d.GetTask(ctx, tx, c.ID, false)
	if err != nil {
		return nil, err
	}
	ev := c.Event
	ev.Queue, ev.Kind = t.Queue, t.Kind
	if err := d.TaskEvents(ctx, tx, []bt.Event{ev}); err != nil {
		return nil, err
	}
	return t, nil
}

// DeadLetterAsIn is store.Tx's DeadLetterAs in tx: the succeeded task
// d.ID becomes an open dead letter with d.Cause's reason and last error
// (d.Cause must be dead), d.Event is written, and the task is returned;
// otherwise nothing changes (nil).
func DeadLetterAsIn(ctx context.Context, d *Dialect, tx Tx, c store.DeadLetterAs) (*bt.Task, error) {
	// The succeeded attempt stays recorded: a store that keeps a success
	// on its task row only (PostgreSQL) gets its execution row first.
	if _, err := tx.Exec(ctx, `INSERT INTO backstop_executions
		(execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome, error, error_detail)
		SELECT t.execution_id, t.id, t.attempt, COALESCE(t.worker_id, ''), COALESCE(t.attempted_at, t.finalized_at),
			t.finalized_at, 'succeeded', NULL, NULL
		FROM backstop_tasks t
		WHERE t.id = $1 AND t.state = 'succeeded' AND t.execution_id IS NOT NULL
			AND EXISTS (SELECT 1 FROM backstop_tasks m WHERE m.id = $2 AND m.state = 'dead')
			AND NOT EXISTS (SELECT 1 FROM backstop_executions x WHERE x.execution_id = t.execution_id)`, c.ID, c.Cause); err != nil {
		return nil, err
	}
	n, err := tx.Exec(ctx, `UPDATE backstop_tasks SET state = 'dead',
		dead_reason = (SELECT m.dead_reason FROM backstop_tasks m WHERE m.id = $1),
		last_error = (SELECT m.last_error FROM backstop_tasks m WHERE m.id = $1),
		dlq_status = 'open', first_seen = COALESCE(first_seen, $2), last_seen = $2,
		dead_count = dead_count + 1, finalized_at = $2, updated_at = $2
		WHERE id = $3 AND state = 'succeeded'
			AND EXISTS (SELECT 1 FROM backstop_tasks m WHERE m.id = $1 AND m.state = 'dead')`, c.Cause, c.Now, c.ID)
	if err != nil || n == 0 {
		return nil, err
	}
	t, err := d.GetTask(ctx, tx, c.ID, false)
	if err != nil {
		return nil, err
	}
	ev := c.Event
	ev.Queue, ev.Kind = t.Queue, t.Kind
	// The body says what any dead letter's says, with the caller's keys.
	body := map[string]any{}
	if len(ev.Body) > 0 {
		if err := json.Unmarshal(ev.Body, &body); err != nil {
			return nil, fmt.Errorf("%s: dead-letter %s: event body: %w", d.Prefix, c.ID, err)
		}
	}
	body["reason"], body["attempt"], body["dead_count"] = t.DeadReason, t.Attempt, t.DeadCount
	if ev.Body, err = json.Marshal(body); err != nil {
		return nil, err
	}
	if ev.Attributes == nil {
		ev.Attributes = t.Attributes
	}
	return t, d.TaskEvents(ctx, tx, []bt.Event{ev})
}

// StartRedrive implements store.DLQ.
func (p *Procedures) StartRedrive(ctx context.Context, r store.Redrive) (store.Redrive, bool, error) {
	d, db := p.dialect, p.writer
	tx, err := db.Begin(ctx)
	if err != nil {
		return r, false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if d.LockRedrive != "" {
		if _, err := tx.Exec(ctx, d.LockRedrive, r.FilterKey); err != nil {
			return r, false, err
		}
	}
	var got store.Redrive
	var filter []byte
	err = tx.QueryRow(ctx, `SELECT id, filter, snapshot, cursor, replayed, failed, status, started_at, kind
		FROM backstop_redrives WHERE filter_key = $1 AND status = 'running' ORDER BY started_at LIMIT 1`, r.FilterKey).
		Scan(&got.ID, &filter, &got.Snapshot, &got.Cursor, &got.Replayed, &got.Failed, &got.Status, &got.StartedAt, &got.Kind)
	if err == nil {
		got.FilterKey, got.Filter = r.FilterKey, filter
		return got, true, tx.Commit(ctx)
	}
	if !errors.Is(err, ErrNoRows) {
		return r, false, err
	}
	r.Kind = cmp.Or(r.Kind, store.JobRedrive)
	if _, err := tx.Exec(ctx, `INSERT INTO backstop_redrives (id, filter_key, filter, snapshot, cursor, status, started_at, kind)
		VALUES ($1, $2, $3, $4, '', 'running', $5, $6)`, r.ID, r.FilterKey, string(r.Filter), r.Snapshot, r.StartedAt, r.Kind); err != nil {
		return r, false, err
	}
	r.Status = "running"
	return r, false, tx.Commit(ctx)
}

// AdvanceRedrive implements store.DLQ.
func (p *Procedures) AdvanceRedrive(ctx context.Context, id, cursor string, replayed, failed int) error {
	_, err := p.writer.Exec(ctx, `UPDATE backstop_redrives SET cursor = $1, replayed = replayed + $2, failed = failed + $3
		WHERE id = $4`, cursor, replayed, failed, id)
	return err
}

// FinishRedrive implements store.DLQ.
func (p *Procedures) FinishRedrive(ctx context.Context, id, status string, at time.Time) error {
	_, err := p.writer.Exec(ctx, `UPDATE backstop_redrives SET status = $1, finished_at = $2 WHERE id = $3`, status, at, id)
	return err
}

// PurgeDLQ implements store.DLQ: batches of at most Limit (1000 when not
// set), each in its own transaction (the driver's PurgeBatch), until a
// batch comes back short.
func (p *Procedures) PurgeDLQ(ctx context.Context, pp store.PurgeParams) (int, error) {
	d := p.dialect
	if len(pp.Statuses) == 0 {
		return 0, nil
	}
	limit := pp.Limit
	if limit <= 0 {
		limit = 1000
	}
	sts := make([]string, len(pp.Statuses))
	for i, st := range pp.Statuses {
		sts[i] = string(st)
	}
	if pp.IDs != nil && len(pp.IDs) == 0 {
		return 0, nil
	}
	if pp.DryRun {
		var n int
		q, args := `SELECT count(*) FROM backstop_tasks
			WHERE state = 'dead' AND dlq_status `+d.InText("$1")+` AND updated_at < $2`, []any{d.TextList(sts), pp.Before}
		if pp.IDs != nil {
			q, args = q+` AND id `+d.InText("$3"), append(args, d.TextList(pp.IDs))
		}
		err := p.reader.QueryRow(ctx, q, args...).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("%s: purge dry run: %w", d.Prefix, err)
		}
		return n, nil
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := d.PurgeBatch(ctx, p.writer, sts, pp.IDs, pp.Before, limit, pp.Event)
		total += n
		if err != nil {
			return total, fmt.Errorf("%s: purge: %w", d.Prefix, err)
		}
		if n < limit || pp.IDs != nil { // a list of ids is one batch
			return total, nil
		}
	}
}
