package sqldialect

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is store.Ordering's cold reads and moves: what the engine
// shows of a task's key, the fallback when ordering is switched off, and
// the copy a replay under a new id makes. The per-key rules applied at
// each claim stay in the drivers.

// OrderingInfo implements store.Ordering.
func (p *Procedures) OrderingInfo(ctx context.Context, ids []string) (map[string]store.OrderingInfo, error) {
	d := p.dialect
	out := map[string]store.OrderingInfo{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := p.reader.Query(ctx, `SELECT o.task_id, o.okey, o.seq, CAST(o.gaps AS TEXT), o.status,
			k.last_seq, k.busy_task, COALESCE(k.busy_seq, 0), k.drain_due_at, bt.state
		FROM backstop_ordering_tasks o
		LEFT JOIN backstop_ordering_keys k ON k.queue = o.queue AND k.okey = o.okey
		LEFT JOIN backstop_tasks bt ON bt.id = k.busy_task
		WHERE o.task_id `+d.InText("$1"), d.TextList(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id              string
			info            store.OrderingInfo
			gaps            *string
			busy, busyState *string
		)
		if err := rows.Scan(&id, &info.Key, &info.Sequence, &gaps, &info.Status,
			&info.LastSequence, &busy, &info.BusySequence, &info.DrainDueAt, &busyState); err != nil {
			return nil, err
		}
		if gaps != nil && *gaps != "" {
			if err := json.Unmarshal([]byte(*gaps), &info.Gaps); err != nil {
				return nil, fmt.Errorf("task %s: gaps: %w", id, err)
			}
		}
		if busy != nil && busyState != nil && bt.State(*busyState).Live() {
			info.BusyTaskID = *busy
		} else {
			info.BusySequence = 0
		}
		out[id] = info
	}
	return out, rows.Err()
}

// OrderingFallback implements store.Ordering: the queue's buffered tasks
// become pending, and its workers wake.
func (p *Procedures) OrderingFallback(ctx context.Context, queue string, now time.Time) (int, error) {
	var n int64
	err := InTx(ctx, p.writer, func(tx Tx) (err error) {
		n, err = tx.Exec(ctx, `UPDATE backstop_tasks SET state = 'pending', updated_at = $1
			WHERE queue = $2 AND state = 'buffered'`, now, queue)
		if err != nil || n == 0 {
			return err
		}
		return tx.Wake(ctx, queue)
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

// copyOrdering gives a copy of a task (replay under a new id) the ordering
// row of the original, if it has one.
func copyOrdering(ctx context.Context, tx Tx, newID, from string) error {
	_, err := tx.Exec(ctx, `INSERT INTO backstop_ordering_tasks (task_id, queue, okey, seq, status, gaps)
		SELECT $1, t.queue, o.okey, o.seq, 'held', o.gaps FROM backstop_ordering_tasks o
		JOIN backstop_tasks t ON t.id = $1 WHERE o.task_id = $2`, newID, from)
	return err
}

// sqlOrderedQueues: the distinct queues of the key states and of the
// waiting ordered tasks, each found by one probe of an index that leads
// with the queue (the next queue after the last one found), so the read
// costs one probe per queue, not one row per key or task.
const sqlOrderedQueues = `WITH RECURSIVE
	k(queue) AS (
		SELECT min(queue) FROM backstop_ordering_keys
		UNION ALL
		SELECT (SELECT min(n.queue) FROM backstop_ordering_keys n WHERE n.queue > k.queue) FROM k WHERE k.queue IS NOT NULL),
	w(queue) AS (
		SELECT min(queue) FROM backstop_ordering_tasks WHERE status IN ('held', 'gap', 'ready', 'replay')
		UNION ALL
		SELECT (SELECT min(n.queue) FROM backstop_ordering_tasks n
			WHERE n.status IN ('held', 'gap', 'ready', 'replay') AND n.queue > w.queue) FROM w WHERE w.queue IS NOT NULL)
SELECT queue FROM k WHERE queue IS NOT NULL
UNION
SELECT queue FROM w WHERE queue IS NOT NULL
ORDER BY 1`

// OrderedQueues implements store.Ordering.
func (p *Procedures) OrderedQueues(ctx context.Context) ([]string, error) {
	rows, err := p.reader.Query(ctx, sqlOrderedQueues)
	if err != nil {
		return nil, fmt.Errorf("%s: ordered queues: %w", p.dialect.Prefix, err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return nil, fmt.Errorf("%s: ordered queues: %w", p.dialect.Prefix, err)
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: ordered queues: %w", p.dialect.Prefix, err)
	}
	return out, nil
}

// OrderingKeys implements store.Ordering: one read of a page of keys (those
// with a state and those with waiting tasks, by the primary key and the
// waiting tasks' index), their states, busy tasks and waiting counts.
func (p *Procedures) OrderingKeys(ctx context.Context, queue, after string, limit int) ([]store.OrderingKeyInfo, error) {
	if limit < 1 || limit > store.MaxOrderingKeys {
		return nil, fmt.Errorf("%s: ordering keys: limit %d out of 1..%d", p.dialect.Prefix, limit, store.MaxOrderingKeys)
	}
	rows, err := p.reader.Query(ctx, `WITH page AS (
			SELECT okey FROM backstop_ordering_keys WHERE queue = $1 AND okey > $2
			UNION
			SELECT okey FROM backstop_ordering_tasks WHERE queue = $1 AND okey > $2
				AND status IN ('held', 'gap', 'ready', 'replay')
			ORDER BY okey LIMIT $3),
		counts AS (
			SELECT o.okey,
				SUM(CASE WHEN o.status = 'gap' THEN 1 ELSE 0 END) AS gap,
				SUM(CASE WHEN o.status = 'held' THEN 1 ELSE 0 END) AS held,
				SUM(CASE WHEN o.status = 'ready' THEN 1 ELSE 0 END) AS ready,
				SUM(CASE WHEN o.status = 'replay' THEN 1 ELSE 0 END) AS replay
			FROM backstop_ordering_tasks o JOIN backstop_tasks t ON t.id = o.task_id AND t.state = 'buffered'
			WHERE o.queue = $1 AND o.okey IN (SELECT okey FROM page) AND o.status IN ('held', 'gap', 'ready', 'replay')
			GROUP BY o.okey)
		SELECT p.okey, k.last_seq, k.busy_task, COALESCE(k.busy_seq, 0), k.drain_due_at, COALESCE(k.drain_step, 0),
			k.expires_at, bt.state, bo.status,
			COALESCE(c.gap, 0), COALESCE(c.held, 0), COALESCE(c.ready, 0), COALESCE(c.replay, 0)
		FROM page p
		LEFT JOIN backstop_ordering_keys k ON k.queue = $1 AND k.okey = p.okey
		LEFT JOIN backstop_tasks bt ON bt.id = k.busy_task
		LEFT JOIN backstop_ordering_tasks bo ON bo.task_id = k.busy_task
		LEFT JOIN counts c ON c.okey = p.okey
		ORDER BY p.okey`, queue, after, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: ordering keys: %w", p.dialect.Prefix, err)
	}
	defer rows.Close()
	out := []store.OrderingKeyInfo{}
	for rows.Next() {
		var (
			k                         store.OrderingKeyInfo
			last                      *int64
			busy, busyState, busyOrd  *string
			busySeq                   int64
			gap, held, ready, replays int64
		)
		if err := rows.Scan(&k.Key, &last, &busy, &busySeq, &k.DrainDueAt, &k.DrainStep, &k.ExpiresAt,
			&busyState, &busyOrd, &gap, &held, &ready, &replays); err != nil {
			return nil, fmt.Errorf("%s: ordering keys: %w", p.dialect.Prefix, err)
		}
		k.LastSequence = last
		if busy != nil && *busy != "" {
			if busyState != nil && bt.State(*busyState).Live() {
				k.BusyTaskID, k.BusySequence = *busy, &busySeq
			} else if busyOrd == nil || *busyOrd != store.OrdReplayed {
				// The busy task ended: the next admission counts its
				// sequence as handled (internal/ordering.Decide).
				if last == nil || busySeq > *last {
					k.LastSequence = &busySeq
				}
			}
		}
		k.Buffered, k.Held, k.Ready, k.Replay = int(gap), int(held), int(ready), int(replays)
		out = append(out, k)
	}
	return out, rows.Err()
}
