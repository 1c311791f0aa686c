package sqldialect

import (
	"context"
	"fmt"
	"slices"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is the dashboard's counts: store.APIStore's CountByQueue and
// store.GaugeReader.

// CountByQueue implements store.APIStore: counts by queue, state and
// dead-letter status, and each queue's oldest pending run_at, in one scan
// of the table, hashed (no index, which would tax every state change; the
// counts of GET /v1/queues and GET /v1/counts), every count exact. The
// oldest pending run_at rides on the same scan: a second read of the
// pending tasks for it (the claim index does not give a queue's minimum,
// its priority comes first) scanned the table again. (PostgreSQL reads
// its indexes instead: pgstore's CountByQueue.)
func (p *Procedures) CountByQueue(ctx context.Context) ([]store.QueueCounts, error) {
	rows, err := p.reader.Query(ctx, SQLCountByQueue)
	if err != nil {
		return nil, fmt.Errorf("%s: count by queue: %w", p.dialect.Prefix, err)
	}
	return ScanQueueCounts(p.dialect.Prefix, rows)
}

// SQLCountByQueue is the exact count of every task by queue, state and
// dead-letter status, in ScanQueueCounts' columns: one grouped scan.
const SQLCountByQueue = `SELECT queue, CAST(state AS TEXT), COALESCE(CAST(dlq_status AS TEXT), ''), count(*), min(run_at), 0
	FROM backstop_tasks GROUP BY queue, state, dlq_status ORDER BY queue`

// ScanQueueCounts reads the rows of a count by queue, ordered by queue:
// (queue, state, dead-letter status or the empty string, count, the
// earliest run_at of the row's pending tasks or NULL, capped: 1 when the
// row's state was counted among some of its tasks only — then every
// queue's count of that state is a lower bound, QueueCounts.Capped). It
// closes rows.
func ScanQueueCounts(prefix string, rows Rows) ([]store.QueueCounts, error) {
	defer rows.Close()
	out := []store.QueueCounts{}
	var capped []bt.State
	for rows.Next() {
		var q, st, dst string
		var n, cut int
		var oldest *time.Time
		if err := rows.Scan(&q, &st, &dst, &n, &oldest, &cut); err != nil {
			return nil, fmt.Errorf("%s: count by queue: %w", prefix, err)
		}
		if len(out) == 0 || out[len(out)-1].Queue != q {
			out = append(out, store.QueueCounts{Queue: q, Counts: map[bt.State]int{}, DeadLetters: map[bt.DLQStatus]int{}})
		}
		c := &out[len(out)-1]
		c.Counts[bt.State(st)] += n
		if st == string(bt.StateDead) && dst != "" {
			c.DeadLetters[bt.DLQStatus(dst)] += n
		}
		if st == string(bt.StatePending) && oldest != nil && (c.OldestPending == nil || oldest.Before(*c.OldestPending)) {
			c.OldestPending = oldest
		}
		if cut != 0 && !slices.Contains(capped, bt.State(st)) {
			capped = append(capped, bt.State(st))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: count by queue: %w", prefix, err)
	}
	if len(capped) > 0 {
		slices.Sort(capped)
		for i := range out {
			out[i].Capped = capped
		}
	}
	return out, nil
}

// sqlGauges: one scan, grouped so the result is bounded by queues × states
// × DLQ statuses (like CountByQueue, no index: one would tax every state
// change to speed up a read done every few seconds). The casts read
// PostgreSQL's enums as text. The open dead letters' oldest last_seen and
// payload bytes ride on the same scan (no second query).
const sqlGauges = `SELECT queue, CAST(state AS TEXT), COALESCE(CAST(dlq_status AS TEXT), ''), count(*),
	min(CASE WHEN state = 'pending' THEN run_at END),
	min(CASE WHEN state = 'running' THEN attempted_at END),
	min(CASE WHEN state = 'dead' AND dlq_status = 'open' THEN last_seen END),
	COALESCE(sum(CASE WHEN state = 'dead' AND dlq_status = 'open' THEN payload_size END), 0)
FROM backstop_tasks GROUP BY queue, state, dlq_status`

// Gauges implements store.GaugeReader.
func (p *Procedures) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	d, q := p.dialect, p.reader
	rows, err := q.Query(ctx, sqlGauges)
	if err != nil {
		return nil, fmt.Errorf("%s: gauges: %w", d.Prefix, err)
	}
	defer rows.Close()
	g := store.NewGaugeSnapshot()
	for rows.Next() {
		var q, st, dlq string
		var n int
		var pending, lease, openDead *time.Time
		var openBytes int64
		if err := rows.Scan(&q, &st, &dlq, &n, &pending, &lease, &openDead, &openBytes); err != nil {
			return nil, fmt.Errorf("%s: gauges: %w", d.Prefix, err)
		}
		g.AddGaugeRow(q, bt.State(st), bt.DLQStatus(dlq), n, pending, lease)
		g.AddOpenDeadLetters(q, openDead, openBytes)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return g, nil
}
