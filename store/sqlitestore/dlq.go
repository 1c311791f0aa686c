package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
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
	if b.IDs != nil { // matched in Go by the client (store.RedriveBatch)
		where += " AND id IN (SELECT value FROM json_each(?))"
		ids, _ := json.Marshal(b.IDs)
		args = append(args, string(ids))
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, queue, dead_reason IS NULL, COALESCE(dead_reason, ''), last_error IS NULL,
		COALESCE(substr(last_error, 1, 200), '') FROM backstop_tasks WHERE `+where+` ORDER BY id LIMIT ?`, append(args, b.Limit)...)
	if err != nil {
		return res, err
	}
	var ids []any
	groups := map[dlqGroup]int{} // the picked dead letters by group (counted: redriveCounted)
	for rows.Next() {
		var (
			id string
			g  dlqGroup
		)
		if err := rows.Scan(&id, &g.queue, &g.reasonNull, &g.reason, &g.errorNull, &g.error); err != nil {
			rows.Close()
			return res, err
		}
		ids = append(ids, id)
		groups[g]++
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
	// The bulk replay counts its own batch (migration 00054): marked, the
	// update triggers skip its rows, and redriveCounted moves the counts
	// and the groups of every row it replayed, all of them picked above,
	// open dead letters (one writer: nothing else changed them since).
	counted := !s.replayPerRow.Load()
	if counted {
		if _, err := tx.ExecContext(ctx, `INSERT INTO backstop_counted_batch (marked) VALUES (1)`); err != nil {
			return res, err
		}
	}
	r, err := tx.QueryContext(ctx, `UPDATE backstop_tasks SET `+replaySet+` WHERE id IN (`+placeholders(len(ids))+`)
		RETURNING id, queue, kind, replay_count`, append(set, ids...)...)
	if err == nil {
		err = scan(r)
	}
	if counted {
		// Unmarked before anything else writes (a failed UPDATE was undone
		// whole: the row by row replay below is the triggers' to count).
		if _, uerr := tx.ExecContext(ctx, `DELETE FROM backstop_counted_batch`); uerr != nil {
			return res, uerr
		}
		if err == nil {
			if err := redriveCounted(ctx, tx, b.State, groups); err != nil {
				return res, err
			}
		}
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
	res.Steps = store.StepIDs(replayed)
	if b.RedriveID != "" {
		if _, err := tx.ExecContext(ctx, `UPDATE backstop_redrives SET cursor = ?, replayed = replayed + ?, failed = failed + ?
			WHERE id = ?`, res.LastID, res.Replayed, len(res.Conflicts), b.RedriveID); err != nil {
			return res, err
		}
		if err := redriveItems(ctx, tx, b, replayed, res.Conflicts); err != nil {
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

// dlqGroup is a dead letter's queue and group (migration 00052's key).
type dlqGroup struct {
	queue      string
	reasonNull bool
	reason     string
	errorNull  bool
	error      string
}

// redriveCounted moves the kept counts of a bulk replay in tx, as the two
// update triggers would have row by row (migration 00054): groups holds
// every replayed dead letter (open, each in its group), now in state to
// without a dead-letter status. One upsert moves the task counts by
// queue; each group's count drops by its rows, and an emptied group's row
// goes.
func redriveCounted(ctx context.Context, tx *sql.Tx, to bt.State, groups map[dlqGroup]int) error {
	byQueue := map[string]int{}
	for g, n := range groups {
		byQueue[g.queue] += n
		if _, err := tx.ExecContext(ctx, `UPDATE backstop_dlq_group_counts SET n = n - ?
			WHERE dlq_status = 'open' AND queue = ? AND reason_null = ? AND reason = ? AND error_null = ? AND error = ?`,
			n, g.queue, g.reasonNull, g.reason, g.errorNull, g.error); err != nil {
			return fmt.Errorf("sqlite: redrive: groups: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM backstop_dlq_group_counts
			WHERE n = 0 AND dlq_status = 'open' AND queue = ? AND reason_null = ? AND reason = ? AND error_null = ? AND error = ?`,
			g.queue, g.reasonNull, g.reason, g.errorNull, g.error); err != nil {
			return fmt.Errorf("sqlite: redrive: groups: %w", err)
		}
	}
	if err := shiftCounts(ctx, tx, bt.StateDead, string(bt.DLQOpen), to, byQueue); err != nil {
		return fmt.Errorf("sqlite: redrive: counts: %w", err)
	}
	return nil
}

// purgeBatch deletes a batch of dead letters (sqldialect's PurgeDLQ loops
// over it) in one transaction.
func purgeBatch(ctx context.Context, db sqldialect.DB, statuses, ids []string, before time.Time, limit int, event func(int) bt.Event) (int, error) {
	var n int
	err := sqldialect.InTx(ctx, db, func(tx sqldialect.Tx) (err error) {
		n, err = purgeBatchTx(ctx, sqlOf(tx), statuses, ids, before, limit)
		if err != nil || n == 0 || event == nil {
			return err
		}
		return insertEvents(ctx, sqlOf(tx), []bt.Event{event(n)})
	})
	return n, err
}

func purgeBatchTx(ctx context.Context, tx *sql.Tx, statuses, only []string, before time.Time, limit int) (int, error) {
	args := make([]any, 0, len(statuses)+len(only)+2)
	for _, st := range statuses {
		args = append(args, st)
	}
	q := `SELECT id FROM backstop_tasks
		WHERE state = 'dead' AND dlq_status IN (` + placeholders(len(statuses)) + `) AND updated_at < ?`
	args = append(args, us(before))
	if only != nil {
		q += ` AND id IN (` + placeholders(len(only)) + `)`
		for _, id := range only {
			args = append(args, id)
		}
	}
	rows, err := tx.QueryContext(ctx, q+` ORDER BY id LIMIT ?`, append(args, limit)...)
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
	return len(ids), nil
}

func (s *Store) CountRedrive(ctx context.Context, b store.RedriveBatch) (int, error) {
	where, args := openDLQWhere(b.Filter, b.Snapshot, b.AfterID)
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM backstop_tasks WHERE `+where, args...).Scan(&n)
	return n, err
}

// redriveItems records each item's outcome in the batch's transaction,
// up to 100 rows per statement.
func redriveItems(ctx context.Context, tx *sql.Tx, b store.RedriveBatch, done []store.Redriven, conflicts []string) error {
	type row struct{ id, outcome, detail string }
	rows := make([]row, 0, len(done)+len(conflicts))
	for _, d := range done {
		rows = append(rows, row{d.ID, store.OutcomeReplayed, ""})
	}
	for _, id := range conflicts {
		rows = append(rows, row{id, store.OutcomeConflict, "a live task holds its idempotency key or merge key"})
	}
	at := us(b.Now)
	for len(rows) > 0 {
		n := min(len(rows), 100)
		var q strings.Builder
		q.WriteString(`INSERT INTO backstop_redrive_items (redrive_id, task_id, outcome, detail, at) VALUES `)
		args := make([]any, 0, 5*n)
		for i, r := range rows[:n] {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?)")
			args = append(args, b.RedriveID, r.id, r.outcome, r.detail, at)
		}
		q.WriteString(` ON CONFLICT (redrive_id, task_id) DO UPDATE SET outcome = excluded.outcome, detail = excluded.detail,
			at = excluded.at WHERE backstop_redrive_items.outcome <> 'replayed'`)
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}
