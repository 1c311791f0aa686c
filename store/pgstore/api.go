package pgstore

import (
	"context"
	"fmt"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// CountByQueue implements store.APIStore. It scans the tasks table (no index
// serves it: an index on (queue, state) would tax every state change on the
// hot path to speed up a dashboard read).
func (s *Store) CountByQueue(ctx context.Context) ([]store.QueueCounts, error) {
	rows, err := s.pool.Query(ctx, `SELECT queue, state, count(*) FROM backstop_tasks GROUP BY queue, state ORDER BY queue`)
	if err != nil {
		return nil, fmt.Errorf("pgstore: count by queue: %w", err)
	}
	defer rows.Close()
	out := []store.QueueCounts{}
	for rows.Next() {
		var q, st string
		var n int
		if err := rows.Scan(&q, &st, &n); err != nil {
			return nil, fmt.Errorf("pgstore: count by queue: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Queue != q {
			out = append(out, store.QueueCounts{Queue: q, Counts: map[bt.State]int{}})
		}
		out[len(out)-1].Counts[bt.State(st)] = n
	}
	return out, rows.Err()
}
