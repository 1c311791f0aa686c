package pgstore

import (
	"context"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// sqlGauges answers the metrics' store-derived gauges from the partial
// indexes that hold each state's tasks with their queue, as sqlCounts
// does: pending (with the oldest run_at) from the claim index, running
// from the running index (the oldest attempted_at read from the rows:
// as many as tasks run at once), scheduled, buffered and dead by
// dead-letter status from backstop_tasks_counts, whose entries carry
// last_seen and payload_size (migration 00055), so that the open dead
// letters' oldest death and payload bytes are an index-only read too. The
// finished tasks are counted among the newest $1 only, as CountByQueue
// counts them (the 9th column says there were more). Columns: queue, state,
// dead-letter status, count, oldest pending run_at, oldest running
// attempted_at, oldest open dead letter's last_seen, open dead letters'
// payload bytes, cut.
const sqlGauges = `WITH finished AS MATERIALIZED (
		SELECT queue, state FROM backstop_tasks WHERE state IN ('succeeded', 'canceled')
		ORDER BY finalized_at DESC LIMIT $1 + 1),
	more AS (SELECT (count(*) > $1)::int AS cut FROM finished)
SELECT queue, 'pending', '', count(*), min(run_at), NULL::timestamptz, NULL::timestamptz, 0::bigint, 0
	FROM backstop_tasks WHERE state = 'pending' GROUP BY queue
UNION ALL
SELECT queue, 'running', '', count(*), NULL, min(attempted_at), NULL, 0, 0
	FROM backstop_tasks WHERE state = 'running' GROUP BY queue
UNION ALL
SELECT queue, state, COALESCE(dlq_status, ''), count(*), NULL, NULL,
	min(last_seen) FILTER (WHERE state = 'dead' AND dlq_status = 'open'),
	COALESCE(sum(payload_size) FILTER (WHERE state = 'dead' AND dlq_status = 'open'), 0), 0
	FROM backstop_tasks WHERE state IN ('scheduled', 'buffered', 'dead') GROUP BY queue, state, dlq_status
UNION ALL
SELECT queue, state, '', count(*), NULL, NULL, NULL, 0, (SELECT cut FROM more)
	FROM (SELECT queue, state FROM finished LIMIT $1) f GROUP BY queue, state`

// Gauges implements store.GaugeReader from the indexes (sqlGauges): every
// count exact but succeeded and canceled, which are counted among the
// newest FinishedCounted finished tasks (GaugeSnapshot.Capped past them),
// so that the read costs the waiting, running and dead tasks, never the
// history.
func (s *Store) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	rows, err := s.pool.Query(ctx, sqlGauges, s.finishedCounted)
	if err != nil {
		return nil, fmt.Errorf("pgstore: gauges: %w", err)
	}
	defer rows.Close()
	g := store.NewGaugeSnapshot()
	for rows.Next() {
		var (
			q, st, dlq               string
			n, cut                   int
			pending, lease, openDead *time.Time
			openBytes                int64
		)
		if err := rows.Scan(&q, &st, &dlq, &n, &pending, &lease, &openDead, &openBytes, &cut); err != nil {
			return nil, fmt.Errorf("pgstore: gauges: %w", err)
		}
		g.AddGaugeRow(q, bt.State(st), bt.DLQStatus(dlq), n, pending, lease)
		g.AddOpenDeadLetters(q, openDead, openBytes)
		if cut != 0 {
			g.Capped = []bt.State{bt.StateCanceled, bt.StateSucceeded}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: gauges: %w", err)
	}
	return g, nil
}
