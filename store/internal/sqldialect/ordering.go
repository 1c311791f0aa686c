package sqldialect

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
	rows, err := p.reader.Query(ctx, `SELECT task_id, okey, seq, CAST(gaps AS TEXT) FROM backstop_ordering_tasks
		WHERE task_id `+d.InText("$1"), d.TextList(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id   string
			info store.OrderingInfo
			gaps *string
		)
		if err := rows.Scan(&id, &info.Key, &info.Sequence, &gaps); err != nil {
			return nil, err
		}
		if gaps != nil && *gaps != "" {
			if err := json.Unmarshal([]byte(*gaps), &info.Gaps); err != nil {
				return nil, fmt.Errorf("task %s: gaps: %w", id, err)
			}
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
