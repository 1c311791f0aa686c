package pgstore

import (
	"context"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// sqlGauges: one scan, grouped so the result is bounded by queues × states
// × DLQ statuses (like CountByQueue, no index: one would tax every state
// change to speed up a read done every few seconds).
const sqlGauges = `SELECT queue, state::text, COALESCE(dlq_status::text, ''), count(*),
	min(run_at) FILTER (WHERE state = 'pending'),
	min(attempted_at) FILTER (WHERE state = 'running')
FROM backstop_tasks GROUP BY queue, state, dlq_status`

// Gauges implements store.GaugeReader.
func (s *Store) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	rows, err := s.pool.Query(ctx, sqlGauges)
	if err != nil {
		return nil, fmt.Errorf("pgstore: gauges: %w", err)
	}
	defer rows.Close()
	g := store.NewGaugeSnapshot()
	for rows.Next() {
		var q, st, dlq string
		var n int
		var pending, lease *time.Time
		if err := rows.Scan(&q, &st, &dlq, &n, &pending, &lease); err != nil {
			return nil, fmt.Errorf("pgstore: gauges: %w", err)
		}
		g.AddGaugeRow(q, bt.State(st), bt.DLQStatus(dlq), n, pending, lease)
	}
	return g, rows.Err()
}
