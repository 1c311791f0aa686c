package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// insertOrdering writes the ordering rows of the newly inserted ordered
// tasks (state buffered, with a key) in the enqueue's transaction.
func insertOrdering(ctx context.Context, db dbtx, tasks []*bt.Task, res []store.EnqueueResult) error {
	const perRow = 4
	var args []any
	for i, t := range tasks {
		if res[i].Merged || res[i].Duplicate || t.OrderingKey == "" || t.State != bt.StateBuffered {
			continue
		}
		args = append(args, t.ID, t.Queue, t.OrderingKey, t.Sequence)
	}
	// One statement per chunk of rows, not one per task.
	for start := 0; start < len(args); start += maxInsertRows * perRow {
		chunk := args[start:min(start+maxInsertRows*perRow, len(args))]
		n := len(chunk) / perRow
		if err := db.exec(ctx, sqlInsertOrdering(n), db.batchArgs(n, chunk)...); err != nil {
			return fmt.Errorf("pgstore: ordering: %w", err)
		}
	}
	return nil
}

// sqlInsertOrdering holds n ordered tasks (task_id, queue, okey, seq).
func sqlInsertOrdering(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO backstop_ordering_tasks (task_id, queue, okey, seq, status) SELECT v.*, 'held' FROM (VALUES ")
	writeValues(&b, n, 4, []string{"::text", "::text", "::text", "::bigint"})
	b.WriteString(") AS v")
	return b.String()
}

const orderKeysLimit = 1000

// sqlKeysToJudge finds the keys of a queue ($1) that admission must look
// at ($2 now, $3 limit): with new or replayed tasks; with a due drain; idle
// and expired; busy with a task that ended (its settle did not judge the
// key: SettleOrdered does for the batches the engine settles). Released
// tasks need no look: a key with any is busy, and its next turn comes when
// its task ends.
const sqlKeysToJudge = `SELECT o.okey FROM backstop_ordering_tasks o
		WHERE o.queue = $1 AND o.status IN ('held', 'replay')
		AND EXISTS (SELECT 1 FROM backstop_tasks t WHERE t.id = o.task_id AND t.state = 'buffered')
	UNION SELECT okey FROM backstop_ordering_keys WHERE queue = $1 AND drain_due_at IS NOT NULL AND drain_due_at <= $2
	UNION SELECT okey FROM backstop_ordering_keys WHERE queue = $1 AND busy_task IS NULL AND drain_due_at IS NULL
		AND expires_at < $2
	UNION SELECT k.okey FROM backstop_ordering_keys k
		WHERE k.queue = $1 AND k.busy_task IS NOT NULL AND NOT EXISTS (SELECT 1 FROM backstop_tasks t
			WHERE t.id = k.busy_task AND t.state IN ('scheduled', 'pending', 'running'))
	LIMIT $3`

// Order implements store.Ordering. The keys to judge are looked for
// first without a transaction (one read: the engine calls Order before
// every claim, and most calls find nothing); when there are some, one
// Order per queue at a time judges them (a transaction-scoped advisory
// lock), each key under its state row's lock (as SettleOrdered takes it).
func (s *Store) Order(ctx context.Context, queue string, set store.OrderingSettings, now time.Time) (store.OrderingDelta, error) {
	var d store.OrderingDelta
	if set.Decide == nil {
		return d, store.ErrNoOrderingPolicy
	}
	rows, err := s.pool.Query(ctx, sqlKeysToJudge, queue, now, orderKeysLimit)
	if err != nil {
		return d, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) == 0 {
		return d, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return d, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// A key another Order judged meanwhile is judged again from what it
	// left: the policy's answer for it is then no change.
	events, d, err := orderKeys(ctx, tx, queue, keys, set, now, true)
	if err != nil {
		return store.OrderingDelta{}, err
	}
	if err := insertEvents(ctx, tx, events); err != nil {
		return store.OrderingDelta{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return store.OrderingDelta{}, err
	}
	return d, nil
}

// SettleOrdered implements store.Ordering: Settle, then the keys whose
// busy task the batch ended are judged in the same transaction.
func (s *Store) SettleOrdered(ctx context.Context, ss []store.Settlement, set func(string) (store.OrderingSettings, bool), now time.Time) ([]bool, map[string]store.OrderingDelta, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	oks, err := s.settle(ctx, tx, ss)
	if err != nil {
		return nil, nil, err
	}
	deltas, err := admitEnded(ctx, tx, store.EndedTasks(ss, oks), set, now)
	if err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, err
	}
	return oks, deltas, nil
}

// admitEnded judges, in tx, the keys whose busy task is one of ended.
func admitEnded(ctx context.Context, tx pgx.Tx, ended []string, set func(string) (store.OrderingSettings, bool), now time.Time) (map[string]store.OrderingDelta, error) {
	if len(ended) == 0 {
		return nil, nil
	}
	// From the tasks' ordering rows to their keys: both by primary key.
	rows, err := tx.Query(ctx, `SELECT k.queue, k.okey FROM backstop_ordering_tasks o
		JOIN backstop_ordering_keys k ON k.queue = o.queue AND k.okey = o.okey AND k.busy_task = o.task_id
		WHERE o.task_id = ANY($1::text[]) ORDER BY k.queue, k.okey`, ended)
	if err != nil {
		return nil, fmt.Errorf("pgstore: ordering: %w", err)
	}
	var (
		queue, key string
		queues     []string
		byQueue    = map[string][]string{}
	)
	if _, err := pgx.ForEachRow(rows, []any{&queue, &key}, func() error {
		if len(byQueue[queue]) == 0 {
			queues = append(queues, queue)
		}
		byQueue[queue] = append(byQueue[queue], key)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("pgstore: ordering: %w", err)
	}
	deltas := map[string]store.OrderingDelta{}
	for _, q := range queues {
		qs, ok := set(q)
		if !ok || qs.Decide == nil {
			continue
		}
		events, d, err := orderKeys(ctx, tx, q, byQueue[q], qs, now, false)
		if err != nil {
			return nil, err
		}
		if err := insertEvents(ctx, tx, events); err != nil {
			return nil, err
		}
		deltas[q] = d
	}
	return deltas, nil
}

// orderKeys applies the policy (set.Decide) to the keys in two round trips:
// one batch of reads (the locks, the key states with their busy task's
// state, the waiting tasks), one batch of writes (the wake-up included).
// queueLock: take Order's per-queue lock first.
func orderKeys(ctx context.Context, tx pgx.Tx, queue string, keys []string, set store.OrderingSettings, now time.Time, queueLock bool) ([]bt.Event, store.OrderingDelta, error) {
	var d store.OrderingDelta
	if len(keys) == 0 {
		return nil, d, nil
	}
	keys = slices.Clone(keys)
	slices.Sort(keys) // the key rows are locked in key order: no deadlock between two judges
	states := make(map[string]*store.OrderingKeyState, len(keys))
	for _, key := range keys {
		states[key] = &store.OrderingKeyState{Queue: queue, Key: key}
	}
	// The reads in one round trip: the queue's advisory lock (Order's),
	// the key rows' locks, then the states and the waiting tasks, each
	// statement seeing what committed before its locks were granted. Both
	// reads start from the key list, one index search per key (OFFSET 0
	// keeps the planner from turning that into a scan of the queue when
	// its statistics are stale).
	var reads pgx.Batch
	if queueLock {
		reads.Queue(`SELECT pg_advisory_xact_lock(hashtext('backstop_ordering'), hashtext($1))`, queue)
	}
	reads.Queue(`SELECT 1 FROM backstop_ordering_keys WHERE queue = $1 AND okey = ANY($2::text[]) ORDER BY okey FOR UPDATE`,
		queue, keys)
	reads.Queue(`SELECT k.okey, k.last_seq, k.busy_task, k.busy_seq, k.drain_due_at, k.drain_step, k.expires_at,
			t.state, o.status, t.kind
		FROM unnest($2::text[]) AS u(okey)
		CROSS JOIN LATERAL (SELECT * FROM backstop_ordering_keys k WHERE k.queue = $1 AND k.okey = u.okey OFFSET 0) k
		LEFT JOIN backstop_tasks t ON t.id = k.busy_task
		LEFT JOIN backstop_ordering_tasks o ON o.task_id = k.busy_task`, queue, keys)
	reads.Queue(`SELECT o.okey, o.task_id, t.kind, o.seq, o.status FROM unnest($2::text[]) AS u(okey)
		CROSS JOIN LATERAL (SELECT o.okey, o.task_id, o.seq, o.status FROM backstop_ordering_tasks o
			WHERE o.queue = $1 AND o.okey = u.okey AND o.status IN ('held', 'gap', 'ready', 'replay') OFFSET 0) o
		JOIN backstop_tasks t ON t.id = o.task_id AND t.state = 'buffered'
		ORDER BY o.okey, o.seq`, queue, keys)
	br := tx.SendBatch(ctx, &reads)
	defer br.Close()
	if queueLock {
		if _, err := br.Exec(); err != nil {
			return nil, d, err
		}
	}
	if _, err := br.Exec(); err != nil {
		return nil, d, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, d, err
	}
	for rows.Next() {
		var (
			key           string
			last          *int64
			due           *time.Time
			busy          *string
			busySeq       int64
			step          int
			expires       time.Time
			state, status *string
			kind          *string
		)
		if err := rows.Scan(&key, &last, &busy, &busySeq, &due, &step, &expires, &state, &status, &kind); err != nil {
			rows.Close()
			return nil, d, err
		}
		k := states[key]
		if k == nil {
			continue
		}
		k.Exists, k.BusySeq, k.DrainStep, k.ExpiresAt = true, busySeq, step, expires.UTC()
		if last != nil {
			k.HasLast, k.Last = true, *last
		}
		if due != nil {
			k.DrainDue = due.UTC()
		}
		if busy != nil {
			k.BusyTask = *busy
			// Done: terminal, gone, or replayed in place since it died (its
			// ordering row waits as a replay: the key must not wait for it).
			k.BusyDone = state == nil || !bt.State(*state).Live() || status != nil && *status == store.OrdReplay
			k.BusyReplay = status != nil && *status == store.OrdReplayed
			if kind != nil {
				k.BusyKind = *kind
			}
			k.BusyOK = state != nil && bt.State(*state) == bt.StateSucceeded
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, d, err
	}
	rows, err = br.Query()
	if err != nil {
		return nil, d, err
	}
	tasks, err := store.CollectOrderingTasks(rows, len(keys))
	rows.Close()
	if err != nil {
		return nil, d, err
	}
	if err := br.Close(); err != nil {
		return nil, d, err
	}
	// The writes, set-based: one statement per kind of change.
	var (
		events              []bt.Event
		staleIDs, staleErrs []string
		admitted            []string
		ordIDs, ordSts      []string
		ordGaps             []*string
		ordAt               = map[string]int{} // task id → index in ordIDs (a task's last action wins)
		delKeys             []string
		upKeys              []string
		upLast              []*int64
		upBusyArg           []*string
		upBusySeq           []int64
		upDue               []*time.Time
		upStep              []int32
		upExpires           []time.Time
	)
	for _, key := range keys {
		k := states[key]
		acts, evs, kd := set.Decide(k, tasks[key], set, now)
		events = append(events, evs...)
		d.Add(kd)
		for _, a := range acts {
			switch a.NewStatus {
			case "stale":
				staleIDs, staleErrs = append(staleIDs, a.TaskID), append(staleErrs, a.Error)
			case store.OrdDone, store.OrdReplayed:
				admitted = append(admitted, a.TaskID)
			}
			var gaps *string
			if g := store.EncodeGaps(a.Gaps); g != "" {
				gaps = &g
			}
			if i, ok := ordAt[a.TaskID]; ok {
				ordSts[i] = a.NewStatus
				if gaps != nil {
					ordGaps[i] = gaps
				}
				continue
			}
			ordAt[a.TaskID] = len(ordIDs)
			ordIDs, ordSts, ordGaps = append(ordIDs, a.TaskID), append(ordSts, a.NewStatus), append(ordGaps, gaps)
		}
		if k.NeedsRemoval {
			delKeys = append(delKeys, key)
			continue
		}
		var lastArg *int64
		var dueArg *time.Time
		var busyArg *string
		if k.HasLast {
			last := k.Last
			lastArg = &last
		}
		if !k.DrainDue.IsZero() {
			due := k.DrainDue
			dueArg = &due
		}
		if k.BusyTask != "" {
			busy := k.BusyTask
			busyArg = &busy
		}
		if k.ExpiresAt.IsZero() {
			k.ExpiresAt = now.Add(set.KeyTTL)
		}
		upKeys, upLast, upBusyArg = append(upKeys, key), append(upLast, lastArg), append(upBusyArg, busyArg)
		upBusySeq, upDue, upStep = append(upBusySeq, k.BusySeq), append(upDue, dueArg), append(upStep, int32(k.DrainStep))
		upExpires = append(upExpires, k.ExpiresAt)
	}
	var batch pgx.Batch
	if len(staleIDs) > 0 {
		batch.Queue(`UPDATE backstop_tasks t SET state = 'canceled', last_error = u.err, finalized_at = $1, updated_at = $1
			FROM unnest($2::text[], $3::text[]) AS u(id, err) WHERE t.id = u.id AND t.state = 'buffered'`,
			now, staleIDs, staleErrs)
	}
	if len(admitted) > 0 {
		batch.Queue(`UPDATE backstop_tasks SET state = 'pending', updated_at = $1
			WHERE id = ANY($2::text[]) AND state = 'buffered'`, now, admitted)
	}
	if len(ordIDs) > 0 {
		batch.Queue(`UPDATE backstop_ordering_tasks o SET status = u.status, gaps = COALESCE(u.gaps::jsonb, o.gaps)
			FROM unnest($1::text[], $2::text[], $3::text[]) AS u(id, status, gaps) WHERE o.task_id = u.id`,
			ordIDs, ordSts, ordGaps)
	}
	if len(delKeys) > 0 {
		batch.Queue(`DELETE FROM backstop_ordering_keys WHERE queue = $1 AND okey = ANY($2::text[])`, queue, delKeys)
	}
	if len(upKeys) > 0 {
		batch.Queue(`INSERT INTO backstop_ordering_keys (queue, okey, last_seq, busy_task, busy_seq,
			drain_due_at, drain_step, expires_at)
			SELECT $1, * FROM unnest($2::text[], $3::int8[], $4::text[], $5::int8[], $6::timestamptz[], $7::int4[],
				$8::timestamptz[])
			ON CONFLICT (queue, okey) DO UPDATE SET last_seq = excluded.last_seq, busy_task = excluded.busy_task,
			busy_seq = excluded.busy_seq, drain_due_at = excluded.drain_due_at, drain_step = excluded.drain_step,
			expires_at = excluded.expires_at`, queue, upKeys, upLast, upBusyArg, upBusySeq, upDue, upStep, upExpires)
	}
	if d.Admitted > 0 {
		batch.Queue(`SELECT pg_notify('`+wakeupChannel+`', $1)`, queue)
	}
	if batch.Len() > 0 {
		if err := tx.SendBatch(ctx, &batch).Close(); err != nil {
			return nil, d, fmt.Errorf("pgstore: ordering: %w", err)
		}
	}
	return events, d, nil
}

// DeleteIdleOrderingKeys implements store.Ordering.
func (s *Store) DeleteIdleOrderingKeys(ctx context.Context, now time.Time, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM backstop_ordering_keys k USING (SELECT queue, okey FROM backstop_ordering_keys
		WHERE busy_task IS NULL AND drain_due_at IS NULL AND expires_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED) d
		WHERE k.queue = d.queue AND k.okey = d.okey`, now, limit)
	if err != nil {
		return 0, fmt.Errorf("pgstore: retention: %w", permission(err))
	}
	return int(tag.RowsAffected()), nil
}

// sqlReplayOrdering makes replayed ordered tasks ($1) wait for their key:
// state buffered, ordering status replay (docs/ordering.md).
const sqlReplayOrdering = `WITH o AS (UPDATE backstop_ordering_tasks SET status = 'replay'
	WHERE task_id = ANY($1::text[]) RETURNING task_id)
UPDATE backstop_tasks t SET state = 'buffered' FROM o WHERE t.id = o.task_id AND t.state IN ('pending', 'scheduled')`

func replayOrdering(ctx context.Context, tx pgx.Tx, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, sqlReplayOrdering, ids); err != nil {
		return fmt.Errorf("pgstore: ordering replay: %w", err)
	}
	return nil
}
