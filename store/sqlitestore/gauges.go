package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// sqlGauges: one scan, grouped so the result is bounded by queues × states
// × DLQ statuses (no index serves it, like CountByQueue: an index would tax
// every state change to speed up a read done every few seconds).
const sqlGauges = `SELECT queue, state, COALESCE(dlq_status, ''), count(*),
	min(CASE WHEN state = 'pending' THEN run_at END),
	min(CASE WHEN state = 'running' THEN attempted_at END)
FROM backstop_tasks GROUP BY queue, state, dlq_status`

// Gauges implements store.GaugeReader.
func (s *Store) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	rows, err := s.r.QueryContext(ctx, sqlGauges)
	if err != nil {
		return nil, fmt.Errorf("sqlite: gauges: %w", err)
	}
	defer rows.Close()
	g := store.NewGaugeSnapshot()
	for rows.Next() {
		var q, st, dlq string
		var n int
		var pending, lease sql.NullInt64
		if err := rows.Scan(&q, &st, &dlq, &n, &pending, &lease); err != nil {
			return nil, fmt.Errorf("sqlite: gauges: %w", err)
		}
		g.AddGaugeRow(q, bt.State(st), bt.DLQStatus(dlq), n, fromNullUS(pending), fromNullUS(lease))
	}
	return g, rows.Err()
}
