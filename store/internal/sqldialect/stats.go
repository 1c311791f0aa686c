package sqldialect

import (
	"context"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Stats implements store.Ops: counts by queue and state, dead letters by
// status and reason, the oldest waiting and running tasks, the tables'
// sizes (the driver's TableSizes) and the leadership leases.
func (p *Procedures) Stats(ctx context.Context) (*store.Stats, error) {
	d, q := p.dialect, p.reader
	fail := func(err error) (*store.Stats, error) {
		return nil, fmt.Errorf("%s: stats: %w", d.Prefix, d.Err(err))
	}
	st := &store.Stats{Driver: d.Driver, Tasks: []store.QueueStateCount{}, DeadLetters: []store.DeadLetterCount{}}
	qs, err := p.CountByQueue(ctx)
	if err != nil {
		return fail(err)
	}
	st.Tasks = store.FlattenQueueCounts(qs)
	rows, err := q.Query(ctx, `SELECT COALESCE(dlq_status, ''), COALESCE(dead_reason, ''), count(*) FROM backstop_tasks
		WHERE state = 'dead' GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var (
			c              store.DeadLetterCount
			status, reason string
		)
		if err := rows.Scan(&status, &reason, &c.Count); err != nil {
			rows.Close()
			return fail(err)
		}
		c.Status, c.Reason = bt.DLQStatus(status), bt.DeadReason(reason)
		st.DeadLetters = append(st.DeadLetters, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	var pending, running *time.Time
	if err := q.QueryRow(ctx, `SELECT (SELECT min(run_at) FROM backstop_tasks WHERE state = 'pending'),
		(SELECT min(attempted_at) FROM backstop_tasks WHERE state = 'running')`).Scan(&pending, &running); err != nil {
		return fail(err)
	}
	st.OldestPendingRunAt, st.OldestRunningSince = pending, running
	if st.Tables, st.DatabaseBytes, err = d.TableSizes(ctx, q); err != nil {
		return fail(err)
	}
	if st.Leaders, err = d.Leaders(ctx, q, ""); err != nil {
		return nil, err
	}
	return st, nil
}
