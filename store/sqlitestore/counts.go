package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// The counts of tasks by queue, state and dead-letter status are kept
// (migration 00048): triggers move a group's count in the transaction that
// inserts, deletes or changes a task, so a read costs the groups, not the
// tasks. The drain's two hot transitions, a claim (pending → running) and
// a success (running → succeeded), are skipped by the trigger (migration
// 00050) and counted by their statements once per batch (moveCounts).

var _ store.CountKeeper = (*Store)(nil)

// CountByQueue implements store.APIStore from the kept counts, and each
// queue's earliest pending run_at from the claim index (queue, priority
// DESC, run_at): the first entry of each of the queue's priorities, found
// by a skip from one priority to the next. One read transaction, so the
// counts and the times agree.
func (s *Store) CountByQueue(ctx context.Context) ([]store.QueueCounts, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: count by queue: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, `SELECT queue, state, dlq_status, n FROM backstop_task_counts
		WHERE n <> 0 ORDER BY queue, state, dlq_status`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count by queue: %w", err)
	}
	out := []store.QueueCounts{}
	for rows.Next() {
		var q, st, dst string
		var n int
		if err := rows.Scan(&q, &st, &dst, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: count by queue: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Queue != q {
			out = append(out, store.QueueCounts{Queue: q, Counts: map[bt.State]int{}, DeadLetters: map[bt.DLQStatus]int{}})
		}
		c := &out[len(out)-1]
		c.Counts[bt.State(st)] += n
		if st == string(bt.StateDead) && dst != "" {
			c.DeadLetters[bt.DLQStatus(dst)] += n
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: count by queue: %w", err)
	}
	for i := range out {
		if out[i].Counts[bt.StatePending] == 0 {
			continue
		}
		if out[i].OldestPending, err = oldestPending(ctx, tx, out[i].Queue); err != nil {
			return nil, fmt.Errorf("sqlite: count by queue: %w", err)
		}
	}
	return out, nil
}

// moveCounts moves the kept counts of the tasks moved from state from to
// state to, by queue, in tx: one upsert per batch for the transitions the
// update trigger skips (migration 00050) — a claim's pending → running and
// a success's running → succeeded, of tasks without a dead-letter status
// (a task has one only while dead) and whose queue is unchanged. Every
// statement that makes one of those two transitions calls it with the
// rows it changed.
func (s *Store) moveCounts(ctx context.Context, tx *sql.Tx, from, to bt.State, moved map[string]int) error {
	if len(moved) == 0 || s.countsPerRow.Load() {
		return nil
	}
	if err := shiftCounts(ctx, tx, from, "", to, moved); err != nil {
		return fmt.Errorf("count %s → %s: %w", from, to, err)
	}
	return nil
}

// shiftCounts moves, in one upsert, the kept counts of moved's tasks (by
// queue) from (from, fromDLQ) to (to, no dead-letter status): the batches
// that count themselves (moveCounts, and a redrive's dead letters:
// redriveCounted).
func shiftCounts(ctx context.Context, tx *sql.Tx, from bt.State, fromDLQ string, to bt.State, moved map[string]int) error {
	var sb strings.Builder
	sb.WriteString(`INSERT INTO backstop_task_counts (queue, state, dlq_status, n) VALUES `)
	args := make([]any, 0, 7*len(moved))
	for q, n := range moved {
		if len(args) > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`(?, ?, ?, ?), (?, ?, '', ?)`)
		args = append(args, q, string(from), fromDLQ, -n, q, string(to), n)
	}
	sb.WriteString(` ON CONFLICT (queue, state, dlq_status) DO UPDATE SET n = n + excluded.n`)
	_, err := tx.ExecContext(ctx, sb.String(), args...)
	return err
}

// oldestPending is the earliest run_at of queue's pending tasks (nil: none),
// one probe of the claim index per priority in use.
func oldestPending(ctx context.Context, tx *sql.Tx, queue string) (*time.Time, error) {
	var oldest *time.Time
	below := int64(math.MaxInt64)
	for {
		var prio, at int64
		err := tx.QueryRowContext(ctx, `SELECT priority, run_at FROM backstop_tasks INDEXED BY backstop_tasks_claim
			WHERE state = 'pending' AND queue = ? AND priority < ? ORDER BY priority DESC, run_at LIMIT 1`, queue, below).Scan(&prio, &at)
		if err == sql.ErrNoRows {
			return oldest, nil
		}
		if err != nil {
			return nil, err
		}
		if t := fromUS(at); oldest == nil || t.Before(*oldest) {
			oldest = &t
		}
		below = prio
	}
}

// FoldCounts implements store.CountKeeper: the triggers and the hot
// statements keep the counts in the writing transaction, so there is
// nothing to fold.
func (s *Store) FoldCounts(context.Context) (int, error) { return 0, nil }

// sqlCountDrift is the difference between a count of the tasks and the
// kept counts, by group.
const sqlCountDrift = `SELECT queue, state, dlq_status, sum(n) FROM (
	SELECT queue, state, COALESCE(dlq_status, '') AS dlq_status, count(*) AS n FROM backstop_tasks GROUP BY 1, 2, 3
	UNION ALL
	SELECT queue, state, dlq_status, -n FROM backstop_task_counts) d
GROUP BY 1, 2, 3 HAVING sum(n) <> 0`

// sqlGroupKey is a dead letter's key in backstop_dlq_group_counts.
const sqlGroupKey = `COALESCE(dlq_status, ''), queue, dead_reason IS NULL, COALESCE(dead_reason, ''),
	last_error IS NULL, COALESCE(substr(last_error, 1, 200), '')`

// sqlGroupCountDrift is how many dead-letter groups differ from a count of
// the dead letters, and by how many dead letters in all.
const sqlGroupCountDrift = `SELECT count(*), COALESCE(sum(abs(n)), 0) FROM (SELECT sum(n) AS n FROM (
	SELECT dlq_status, queue, reason_null, reason, error_null, error, -n AS n FROM backstop_dlq_group_counts
	UNION ALL
	SELECT ` + sqlGroupKey + `, count(*) FROM backstop_tasks WHERE state = 'dead' GROUP BY 1, 2, 3, 4, 5, 6) d
GROUP BY dlq_status, queue, reason_null, reason, error_null, error HAVING sum(n) <> 0)`

// ReconcileCounts implements store.CountKeeper: in one writer transaction
// (nothing writes meanwhile), a grouped scan of every task compared with
// the kept counts, and the difference added to them; then the dead
// letters' groups likewise (rebuilt when any differs).
func (s *Store) ReconcileCounts(ctx context.Context) (store.CountDrift, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return store.CountDrift{}, fmt.Errorf("sqlite: reconcile counts: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, sqlCountDrift)
	if err != nil {
		return store.CountDrift{}, fmt.Errorf("sqlite: reconcile counts: %w", err)
	}
	type fix struct {
		queue, state, dlq string
		n                 int
	}
	var fixes []fix
	var d store.CountDrift
	for rows.Next() {
		var f fix
		if err := rows.Scan(&f.queue, &f.state, &f.dlq, &f.n); err != nil {
			rows.Close()
			return store.CountDrift{}, fmt.Errorf("sqlite: reconcile counts: %w", err)
		}
		fixes = append(fixes, f)
		d.Groups++
		d.Tasks += max(f.n, -f.n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return store.CountDrift{}, fmt.Errorf("sqlite: reconcile counts: %w", err)
	}
	for _, f := range fixes {
		if _, err := tx.ExecContext(ctx, `INSERT INTO backstop_task_counts (queue, state, dlq_status, n) VALUES (?, ?, ?, ?)
			ON CONFLICT (queue, state, dlq_status) DO UPDATE SET n = n + excluded.n`, f.queue, f.state, f.dlq, f.n); err != nil {
			return store.CountDrift{}, fmt.Errorf("sqlite: reconcile counts: %w", err)
		}
	}
	// The dead letters' groups (migration 00052; a schema before it, as in
	// a migration's own test, has none): counted again when any differs.
	var groups, tasks int
	err = tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'backstop_dlq_group_counts'`).Scan(&groups)
	if err == nil && groups > 0 {
		err = tx.QueryRowContext(ctx, sqlGroupCountDrift).Scan(&groups, &tasks)
	}
	if err != nil {
		return store.CountDrift{}, fmt.Errorf("sqlite: reconcile dead-letter groups: %w", err)
	}
	if groups > 0 {
		d.Groups, d.Tasks = d.Groups+groups, d.Tasks+tasks
		if _, err := tx.ExecContext(ctx, `DELETE FROM backstop_dlq_group_counts`); err != nil {
			return store.CountDrift{}, fmt.Errorf("sqlite: reconcile dead-letter groups: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO backstop_dlq_group_counts (dlq_status, queue, reason_null, reason, error_null, error, n)
			SELECT `+sqlGroupKey+`, count(*) FROM backstop_tasks WHERE state = 'dead' GROUP BY 1, 2, 3, 4, 5, 6`); err != nil {
			return store.CountDrift{}, fmt.Errorf("sqlite: reconcile dead-letter groups: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return store.CountDrift{}, fmt.Errorf("sqlite: reconcile counts: %w", err)
	}
	return d, nil
}
