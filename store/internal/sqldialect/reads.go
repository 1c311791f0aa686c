package sqldialect

import (
	"context"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is the dashboard's counts: store.APIStore's CountByQueue and
// store.GaugeReader.

// CountByQueue implements store.APIStore: counts by queue, state and
// dead-letter status (a scan of the table, hashed: no index, which would
// tax every state change; the counts of GET /v1/queues and GET
// /v1/counts), then each queue's oldest pending run_at through the claim
// index (pending tasks only, queue first).
func (p *Procedures) CountByQueue(ctx context.Context) ([]store.QueueCounts, error) {
	d, q := p.dialect, p.reader
	rows, err := q.Query(ctx, `SELECT queue, CAST(state AS TEXT), COALESCE(CAST(dlq_status AS TEXT), ''), count(*)
		FROM backstop_tasks GROUP BY queue, state, dlq_status ORDER BY queue`)
	if err != nil {
		return nil, fmt.Errorf("%s: count by queue: %w", d.Prefix, err)
	}
	defer rows.Close()
	out := []store.QueueCounts{}
	for rows.Next() {
		var q, st, dst string
		var n int
		if err := rows.Scan(&q, &st, &dst, &n); err != nil {
			return nil, fmt.Errorf("%s: count by queue: %w", d.Prefix, err)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: count by queue: %w", d.Prefix, err)
	}
	rows.Close()
	rows, err = q.Query(ctx, `SELECT queue, min(run_at) FROM backstop_tasks WHERE state = 'pending' GROUP BY queue`)
	if err != nil {
		return nil, fmt.Errorf("%s: oldest pending by queue: %w", d.Prefix, err)
	}
	defer rows.Close()
	at := make(map[string]int, len(out))
	for i, c := range out {
		at[c.Queue] = i
	}
	for rows.Next() {
		var q string
		var oldest time.Time
		if err := rows.Scan(&q, &oldest); err != nil {
			return nil, fmt.Errorf("%s: oldest pending by queue: %w", d.Prefix, err)
		}
		if i, ok := at[q]; ok { // a queue pending since the counts were read is left out
			out[i].OldestPending = &oldest
		}
	}
	return out, rows.Err()
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
	limits, err := p.ListLimits(ctx) // limits.go
	if err != nil {
		return nil, err
	}
	for _, l := range limits {
		g.LimitWaiting[l.Name] = 0
	}
	uses, err := p.LimitUses(ctx)
	if err != nil {
		return nil, err
	}
	for _, u := range uses {
		g.LimitWaiting[u.Limit] += u.Waiting
	}
	return g, nil
}
