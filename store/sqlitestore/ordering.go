package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// insertOrdering writes the ordering rows of the newly inserted ordered
// tasks (state buffered, with a key) in the enqueue's transaction.
func insertOrdering(ctx context.Context, q querier, res []store.EnqueueResult) error {
	for _, r := range res {
		t := r.Task
		if r.Merged || r.Duplicate || t == nil || t.OrderingKey == "" || t.State != bt.StateBuffered {
			continue
		}
		if _, err := q.ExecContext(ctx, `INSERT INTO backstop_ordering_tasks (task_id, queue, okey, seq, status)
			VALUES (?, ?, ?, ?, 'held')`, t.ID, t.Queue, t.OrderingKey, t.Sequence); err != nil {
			return fmt.Errorf("sqlite: ordering: %w", err)
		}
	}
	return nil
}

const orderKeysLimit = 1000

// sqlKeysToJudge finds the keys of a queue (?1) that admission must look
// at (?2 now, ?3 limit): with new or replayed tasks; with a due drain; idle
// and expired; busy with a task that ended (its settle did not judge the
// key: SettleOrdered does for the batches the engine settles). Released
// tasks need no look: a key with any is busy, and its next turn comes when
// its task ends. The status term is the partial index's condition, so that
// the planner searches that index (without statistics it would rather scan
// every task for state = 'buffered').
const sqlKeysToJudge = `SELECT o.okey FROM backstop_ordering_tasks o
		WHERE o.queue = ?1 AND o.status IN ('held', 'replay')
		AND EXISTS (SELECT 1 FROM backstop_tasks t WHERE t.id = o.task_id AND t.state = 'buffered')
	UNION SELECT okey FROM backstop_ordering_keys WHERE queue = ?1 AND drain_due_at IS NOT NULL AND drain_due_at <= ?2
	UNION SELECT okey FROM backstop_ordering_keys WHERE queue = ?1 AND busy_task IS NULL AND drain_due_at IS NULL
		AND expires_at < ?2
	UNION SELECT k.okey FROM backstop_ordering_keys k INDEXED BY backstop_ordering_keys_busy
		WHERE k.queue = ?1 AND k.busy_task IS NOT NULL AND NOT EXISTS (SELECT 1 FROM backstop_tasks t
			WHERE t.id = k.busy_task AND t.state IN ('scheduled', 'pending', 'running'))
	LIMIT ?3`

// keysToJudge runs sqlKeysToJudge on q.
func keysToJudge(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, queue string, now time.Time) ([]string, error) {
	rows, err := q.QueryContext(ctx, sqlKeysToJudge, queue, us(now), orderKeysLimit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// Order implements store.Ordering. The keys to judge are looked for first
// on a reader (the engine calls Order before every claim, and most calls
// find nothing): the single writer is taken only when there are some.
func (s *Store) Order(ctx context.Context, queue string, set store.OrderingSettings, now time.Time) (store.OrderingDelta, error) {
	var d store.OrderingDelta
	if set.Decide == nil {
		return d, store.ErrNoOrderingPolicy
	}
	if keys, err := keysToJudge(ctx, s.r, queue, now); err != nil || len(keys) == 0 {
		return d, err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return d, err
	}
	defer tx.Rollback() //nolint:errcheck
	keys, err := keysToJudge(ctx, tx, queue, now)
	if err != nil {
		return d, err
	}
	events, d, err := orderKeys(ctx, tx, queue, keys, set, now)
	if err != nil {
		return store.OrderingDelta{}, fmt.Errorf("sqlite: ordering: %w", err)
	}
	if err := insertEvents(ctx, tx, events); err != nil {
		return store.OrderingDelta{}, err
	}
	if err := tx.Commit(); err != nil {
		return store.OrderingDelta{}, err
	}
	if d.Admitted > 0 {
		s.hub.notify(map[string]struct{}{queue: {}})
	}
	return d, nil
}

// SettleOrdered implements store.Ordering: Settle, then the keys whose
// busy task the batch ended are judged in the same transaction.
func (s *Store) SettleOrdered(ctx context.Context, ss []store.Settlement, set func(string) (store.OrderingSettings, bool), now time.Time) ([]bool, map[string]store.OrderingDelta, error) {
	ss = store.CleanSettlements(ss) // store/text.go: an error text is never lost for its bytes
	if len(ss) == 0 {
		return nil, nil, nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback() //nolint:errcheck
	oks, woke, err := s.settle(ctx, tx, ss)
	if err != nil {
		return nil, nil, err
	}
	deltas, err := admitEnded(ctx, tx, store.EndedTasks(ss, oks), set, now)
	if err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, err
	}
	for q, d := range deltas {
		if d.Admitted > 0 {
			if woke == nil {
				woke = map[string]struct{}{}
			}
			woke[q] = struct{}{}
		}
	}
	s.hub.notify(woke)
	return oks, deltas, nil
}

// admitEnded judges, in tx, the keys whose busy task is one of ended.
func admitEnded(ctx context.Context, tx *sql.Tx, ended []string, set func(string) (store.OrderingSettings, bool), now time.Time) (map[string]store.OrderingDelta, error) {
	if len(ended) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(ended)
	if err != nil {
		return nil, err
	}
	// From the tasks' ordering rows to their keys: both by primary key.
	rows, err := tx.QueryContext(ctx, `SELECT k.queue, k.okey FROM backstop_ordering_tasks o
		JOIN backstop_ordering_keys k ON k.queue = o.queue AND k.okey = o.okey AND k.busy_task = o.task_id
		WHERE o.task_id IN (SELECT value FROM json_each(?)) ORDER BY k.queue, k.okey`, string(list))
	if err != nil {
		return nil, fmt.Errorf("sqlite: ordering: %w", err)
	}
	var queues []string
	byQueue := map[string][]string{}
	for rows.Next() {
		var q, k string
		if err := rows.Scan(&q, &k); err != nil {
			rows.Close()
			return nil, err
		}
		if len(byQueue[q]) == 0 {
			queues = append(queues, q)
		}
		byQueue[q] = append(byQueue[q], k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	deltas := map[string]store.OrderingDelta{}
	for _, q := range queues {
		qs, ok := set(q)
		if !ok || qs.Decide == nil {
			continue
		}
		events, d, err := orderKeys(ctx, tx, q, byQueue[q], qs, now)
		if err != nil {
			return nil, fmt.Errorf("sqlite: ordering: %w", err)
		}
		if err := insertEvents(ctx, tx, events); err != nil {
			return nil, err
		}
		deltas[q] = d
	}
	return deltas, nil
}

// orderKeys applies the policy (set.Decide) to the keys: one read of their states (with the
// busy task's state), one of their waiting tasks, then the writes.
func orderKeys(ctx context.Context, tx *sql.Tx, queue string, keys []string, set store.OrderingSettings, now time.Time) ([]bt.Event, store.OrderingDelta, error) {
	var d store.OrderingDelta
	if len(keys) == 0 {
		return nil, d, nil
	}
	list, err := json.Marshal(keys)
	if err != nil {
		return nil, d, err
	}
	states := make(map[string]*store.OrderingKeyState, len(keys))
	for _, key := range keys {
		states[key] = &store.OrderingKeyState{Queue: queue, Key: key}
	}
	rows, err := tx.QueryContext(ctx, `SELECT k.okey, k.last_seq, k.busy_task, k.busy_seq, k.drain_due_at, k.drain_step,
			k.expires_at, t.state, o.status, t.kind
		FROM backstop_ordering_keys k
		LEFT JOIN backstop_tasks t ON t.id = k.busy_task
		LEFT JOIN backstop_ordering_tasks o ON o.task_id = k.busy_task
		WHERE k.queue = ? AND k.okey IN (SELECT value FROM json_each(?))`, queue, string(list))
	if err != nil {
		return nil, d, err
	}
	for rows.Next() {
		var (
			key           string
			last, due     sql.NullInt64
			busy          sql.NullString
			busySeq       int64
			step          int
			expires       int64
			state, status sql.NullString
			kind          sql.NullString
		)
		if err := rows.Scan(&key, &last, &busy, &busySeq, &due, &step, &expires, &state, &status, &kind); err != nil {
			rows.Close()
			return nil, d, err
		}
		k := states[key]
		if k == nil {
			continue
		}
		k.Exists, k.BusySeq, k.DrainStep, k.ExpiresAt = true, busySeq, step, fromUS(expires)
		k.HasLast, k.Last = last.Valid, last.Int64
		if due.Valid {
			k.DrainDue = fromUS(due.Int64)
		}
		if busy.Valid && busy.String != "" {
			k.BusyTask = busy.String
			// Done: terminal, gone, or replayed in place since it died (its
			// ordering row waits as a replay: the key must not wait for it).
			k.BusyDone = !state.Valid || !bt.State(state.String).Live() || status.String == store.OrdReplay
			k.BusyReplay = status.String == store.OrdReplayed
			k.BusyKind = kind.String
			k.BusyOK = state.Valid && bt.State(state.String) == bt.StateSucceeded
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, d, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT o.okey, o.task_id, t.kind, o.seq, o.status FROM backstop_ordering_tasks o
		JOIN backstop_tasks t ON t.id = o.task_id AND t.state = 'buffered'
		WHERE o.queue = ? AND o.okey IN (SELECT value FROM json_each(?))
		AND o.status IN ('held', 'gap', 'ready', 'replay') ORDER BY o.okey, o.seq`, queue, string(list))
	if err != nil {
		return nil, d, err
	}
	tasks, err := store.CollectOrderingTasks(rows, len(keys))
	rows.Close()
	if err != nil {
		return nil, d, err
	}
	var events []bt.Event
	for _, key := range keys {
		evs, kd, err := applyKey(ctx, tx, states[key], tasks[key], set, now)
		if err != nil {
			return nil, d, fmt.Errorf("key %q: %w", key, err)
		}
		events = append(events, evs...)
		d.Add(kd)
	}
	return events, d, nil
}

// applyKey decides one key and writes the outcome.
func applyKey(ctx context.Context, tx *sql.Tx, k *store.OrderingKeyState, tasks []store.OrderingTask, set store.OrderingSettings, now time.Time) ([]bt.Event, store.OrderingDelta, error) {
	n := us(now)
	queue, key := k.Queue, k.Key
	acts, evs, d := set.Decide(k, tasks, set, now)
	for _, a := range acts {
		switch a.NewStatus {
		case "stale":
			if _, err := tx.ExecContext(ctx, `UPDATE backstop_tasks SET state = 'canceled', last_error = ?, finalized_at = ?,
				updated_at = ? WHERE id = ? AND state = 'buffered'`, a.Error, n, n, a.TaskID); err != nil {
				return nil, d, err
			}
		case store.OrdDone, store.OrdReplayed:
			if _, err := tx.ExecContext(ctx, `UPDATE backstop_tasks SET state = 'pending', updated_at = ?
				WHERE id = ? AND state = 'buffered'`, n, a.TaskID); err != nil {
				return nil, d, err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE backstop_ordering_tasks SET status = ?, gaps = COALESCE(?, gaps)
			WHERE task_id = ?`, a.NewStatus, nullStr(store.EncodeGaps(a.Gaps)), a.TaskID); err != nil {
			return nil, d, err
		}
	}
	if k.NeedsRemoval {
		_, err := tx.ExecContext(ctx, `DELETE FROM backstop_ordering_keys WHERE queue = ? AND okey = ?`, queue, key)
		return evs, d, err
	}
	var lastArg, dueArg any
	if k.HasLast {
		lastArg = k.Last
	}
	if !k.DrainDue.IsZero() {
		dueArg = us(k.DrainDue)
	}
	if k.ExpiresAt.IsZero() {
		k.ExpiresAt = now.Add(set.KeyTTL)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO backstop_ordering_keys (queue, okey, last_seq, busy_task, busy_seq,
		drain_due_at, drain_step, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (queue, okey) DO UPDATE SET last_seq = excluded.last_seq, busy_task = excluded.busy_task,
		busy_seq = excluded.busy_seq, drain_due_at = excluded.drain_due_at, drain_step = excluded.drain_step,
		expires_at = excluded.expires_at`, queue, key, lastArg, nullStr(k.BusyTask), k.BusySeq, dueArg, k.DrainStep, us(k.ExpiresAt))
	return evs, d, err
}

func (s *Store) DeleteIdleOrderingKeys(ctx context.Context, now time.Time, limit int) (int, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM backstop_ordering_keys WHERE (queue, okey) IN (SELECT k.queue, k.okey
		FROM backstop_ordering_keys k WHERE k.busy_task IS NULL AND k.drain_due_at IS NULL AND k.expires_at < ? LIMIT ?)`,
		us(now), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: retention: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// replayOrdering makes replayed ordered tasks (ids) wait for their key:
// state buffered, ordering status replay (docs/ordering.md).
func replayOrdering(ctx context.Context, q querier, ids []any) error {
	if len(ids) == 0 {
		return nil
	}
	in := placeholders(len(ids))
	res, err := q.ExecContext(ctx, `UPDATE backstop_ordering_tasks SET status = 'replay' WHERE task_id IN (`+in+`)`, ids...)
	if err != nil {
		return fmt.Errorf("sqlite: ordering replay: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	_, err = q.ExecContext(ctx, `UPDATE backstop_tasks SET state = 'buffered' WHERE id IN (`+in+`)
		AND state IN ('pending', 'scheduled')
		AND EXISTS (SELECT 1 FROM backstop_ordering_tasks o WHERE o.task_id = backstop_tasks.id)`, ids...)
	if err != nil {
		return fmt.Errorf("sqlite: ordering replay: %w", err)
	}
	return nil
}
