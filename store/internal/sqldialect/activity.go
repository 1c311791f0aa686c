package sqldialect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop/store"
)

// This file is store.ActivityRollup: the rollup rows and their watermark,
// and the read of the finished work they are made from. The SQL that
// differs (a bucket of a time, the microseconds between two times) is the
// driver's ActivityExprs.

// ActivityExprs are the driver's SQL for the finished-work read.
type ActivityExprs struct {
	// Bucket is the bucket number of the time column col, buckets of
	// width seconds counted from the epoch (an integer).
	Bucket func(col string, seconds int64) string
	// Micros is the microseconds from time expression b to a (an integer).
	Micros func(a, b string) string
	// HistIndex numbers the histogram bucket of the microseconds in col
	// by bounds: how many bounds are at most it (HistCase, or the
	// database's own function).
	HistIndex func(col string, bounds []int64) string
}

// HistCase is ActivityExprs.HistIndex as a CASE expression.
func HistCase(col string, bounds []int64) string {
	var b strings.Builder
	b.WriteString("CASE")
	for i, bound := range bounds {
		fmt.Fprintf(&b, " WHEN %s < %d THEN %d", col, bound, i)
	}
	fmt.Fprintf(&b, " ELSE %d END", len(bounds))
	return b.String()
}

// FinishedWorkSQL are the finished-work read's three statements, each of
// the span [$1, $2), buckets of secs seconds: the tasks that succeeded,
// the attempts that failed, the tasks that died. Each reads its span
// through a partial index that holds only its rows (backstop_tasks_finished,
// backstop_executions_failed, backstop_tasks_dead), so a round costs the
// work finished in its span, not the history kept: each statement repeats
// its index's WHERE term, which SQLite needs to read a partial index (a
// state = of one of the index's states does not imply its IN).
func FinishedWorkSQL(x ActivityExprs, secs int64, bounds []int64) [3]string {
	started := `COALESCE(attempted_at, finalized_at)`
	return [3]string{
		// The tasks that succeeded: the attempt that succeeded is in the
		// task row.
		`SELECT b, queue, kind, ` + x.HistIndex("w", bounds) + `, ` + x.HistIndex("r", bounds) + `, count(*) FROM (
			SELECT ` + x.Bucket("finalized_at", secs) + ` AS b, queue, kind,
				` + x.Micros(started, "run_at") + ` AS w, ` + x.Micros("finalized_at", started) + ` AS r
			FROM backstop_tasks WHERE state IN ('succeeded', 'canceled') AND state = 'succeeded'
				AND finalized_at >= $1 AND finalized_at < $2) f
			GROUP BY 1, 2, 3, 4, 5`,
		// The attempts that failed; the task outlived it unless it ended
		// the task.
		`SELECT b, queue, kind, retried, ` + x.HistIndex("r", bounds) + `, count(*) FROM (
			SELECT ` + x.Bucket("e.finished_at", secs) + ` AS b, t.queue, t.kind,
				CASE WHEN t.execution_id = e.execution_id AND t.state IN ('dead', 'canceled') THEN 0 ELSE 1 END AS retried,
				` + x.Micros("e.finished_at", "e.started_at") + ` AS r
			FROM backstop_executions e JOIN backstop_tasks t ON t.id = e.task_id
			WHERE e.outcome IN ('transient_error', 'permanent_error', 'timeout', 'lease_expired')
				AND e.finished_at >= $1 AND e.finished_at < $2) f
			GROUP BY 1, 2, 3, 4, 5`,
		// The tasks that died.
		`SELECT ` + x.Bucket("last_seen", secs) + `, queue, kind, count(*) FROM backstop_tasks
			WHERE state = 'dead' AND last_seen >= $1 AND last_seen < $2 GROUP BY 1, 2, 3`,
	}
}

// ReadFinishedWork is store.ActivityRollup's FinishedWork with the
// driver's expressions.
func (p *Procedures) ReadFinishedWork(ctx context.Context, x ActivityExprs, since, until time.Time, width time.Duration, bounds []int64) ([]store.ActivityRow, error) {
	secs := int64(width / time.Second)
	if secs <= 0 || width%time.Second != 0 {
		return nil, fmt.Errorf("%s: finished work: width %s is not whole seconds", p.dialect.Prefix, width)
	}
	type key struct {
		b           int64
		queue, kind string
	}
	rows := map[key]*store.ActivityRow{}
	order := []key{}
	row := func(k key) *store.ActivityRow {
		r := rows[k]
		if r == nil {
			r = &store.ActivityRow{Width: width, Bucket: time.Unix(k.b*secs, 0).UTC(), Queue: k.queue, Kind: k.kind}
			rows[k] = r
			order = append(order, k)
		}
		return r
	}
	hist := func(h []int64, i int, n int64) []int64 {
		if i >= len(h) {
			h = append(h, make([]int64, i+1-len(h))...)
		}
		h[i] += n
		return h
	}
	stmts := FinishedWorkSQL(x, secs, bounds)
	queries := []struct {
		sql  string
		scan func(Rows) error
	}{
		{stmts[0], // succeeded
			func(rs Rows) error {
				var k key
				var wi, ri int
				var n int64
				if err := rs.Scan(&k.b, &k.queue, &k.kind, &wi, &ri, &n); err != nil {
					return err
				}
				r := row(k)
				r.Succeeded += n
				r.Wait, r.Run = hist(r.Wait, wi, n), hist(r.Run, ri, n)
				return nil
			}},
		{stmts[1], // failed attempts
			func(rs Rows) error {
				var k key
				var retried, ri int
				var n int64
				if err := rs.Scan(&k.b, &k.queue, &k.kind, &retried, &ri, &n); err != nil {
					return err
				}
				r := row(k)
				r.Failed += n
				if retried == 1 {
					r.Retried += n
				}
				r.Run = hist(r.Run, ri, n)
				return nil
			}},
		{stmts[2], // dead
			func(rs Rows) error {
				var k key
				var n int64
				if err := rs.Scan(&k.b, &k.queue, &k.kind, &n); err != nil {
					return err
				}
				row(k).Dead += n
				return nil
			}},
	}
	for _, q := range queries {
		rs, err := p.reader.Query(ctx, q.sql, since, until)
		if err != nil {
			return nil, fmt.Errorf("%s: finished work: %w", p.dialect.Prefix, err)
		}
		for rs.Next() {
			if err := q.scan(rs); err != nil {
				rs.Close()
				return nil, fmt.Errorf("%s: finished work: %w", p.dialect.Prefix, err)
			}
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("%s: finished work: %w", p.dialect.Prefix, err)
		}
	}
	out := make([]store.ActivityRow, len(order))
	for i, k := range order {
		out[i] = *rows[k]
	}
	return out, nil
}

// encodeHist writes a histogram as its counts, comma-separated, without
// trailing zeros.
func encodeHist(h []int64) string {
	n := len(h)
	for n > 0 && h[n-1] == 0 {
		n--
	}
	var b strings.Builder
	for i, c := range h[:n] {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(c, 10))
	}
	return b.String()
}

func decodeHist(s string) ([]int64, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("histogram %q: %w", s, err)
		}
		out[i] = n
	}
	return out, nil
}

const activityColumns = `width_s, bucket, queue, kind, succeeded, failed, retried, dead, wait_hist, run_hist`

func scanActivity(row Row) (store.ActivityRow, error) {
	var r store.ActivityRow
	var width int64
	var wait, run string
	if err := row.Scan(&width, &r.Bucket, &r.Queue, &r.Kind, &r.Succeeded, &r.Failed, &r.Retried, &r.Dead, &wait, &run); err != nil {
		return r, err
	}
	r.Width = time.Duration(width) * time.Second
	var err error
	if r.Wait, err = decodeHist(wait); err != nil {
		return r, err
	}
	r.Run, err = decodeHist(run)
	return r, err
}

// AddActivity implements store.ActivityRollup: the watermark row is
// locked first (SQLite's writer began IMMEDIATE), so two rounds never
// both add the same work.
func (p *Procedures) AddActivity(ctx context.Context, from, to time.Time, rows []store.ActivityRow) error {
	d := p.dialect
	err := InTx(ctx, p.writer, func(tx Tx) error {
		var cur time.Time
		err := tx.QueryRow(ctx, `SELECT rolled_up_to FROM backstop_activity_rollup WHERE id = 1`+d.ForUpdate).Scan(&cur)
		switch {
		case errors.Is(err, ErrNoRows):
			if !from.IsZero() {
				return fmt.Errorf("%w: the activity rollup has no watermark, the round read from %s", store.ErrConflict, from.UTC().Format(time.RFC3339Nano))
			}
		case err != nil:
			return err
		case !cur.Equal(from):
			return fmt.Errorf("%w: the activity rollup is at %s, the round read from %s", store.ErrConflict,
				cur.UTC().Format(time.RFC3339Nano), from.UTC().Format(time.RFC3339Nano))
		}
		for _, r := range rows {
			width := int64(r.Width / time.Second)
			old, err := scanActivity(tx.QueryRow(ctx, `SELECT `+activityColumns+` FROM backstop_activity
				WHERE width_s = $1 AND bucket = $2 AND queue = $3 AND kind = $4`+d.ForUpdate, width, r.Bucket, r.Queue, r.Kind))
			if err != nil && !errors.Is(err, ErrNoRows) {
				return err
			}
			old.Add(r)
			if _, err := tx.Exec(ctx, `INSERT INTO backstop_activity (`+activityColumns+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
				ON CONFLICT (width_s, bucket, queue, kind) DO UPDATE SET succeeded = excluded.succeeded, failed = excluded.failed,
					retried = excluded.retried, dead = excluded.dead, wait_hist = excluded.wait_hist, run_hist = excluded.run_hist`,
				width, r.Bucket, r.Queue, r.Kind, old.Succeeded, old.Failed, old.Retried, old.Dead,
				encodeHist(old.Wait), encodeHist(old.Run)); err != nil {
				return err
			}
		}
		if from.IsZero() {
			_, err = tx.Exec(ctx, `INSERT INTO backstop_activity_rollup (id, rolled_up_to) VALUES (1, $1)`, to)
		} else {
			_, err = tx.Exec(ctx, `UPDATE backstop_activity_rollup SET rolled_up_to = $1 WHERE id = 1`, to)
		}
		return err
	})
	if d.IsUnique(err) {
		return fmt.Errorf("%w: another round started the activity rollup", store.ErrConflict)
	}
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%s: add activity: %w", d.Prefix, d.Err(err))
	}
	return err
}

// ActivityWatermark implements store.ActivityRollup.
func (p *Procedures) ActivityWatermark(ctx context.Context) (time.Time, bool, error) {
	var at time.Time
	err := p.reader.QueryRow(ctx, `SELECT rolled_up_to FROM backstop_activity_rollup WHERE id = 1`).Scan(&at)
	if errors.Is(err, ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%s: activity watermark: %w", p.dialect.Prefix, err)
	}
	return at, true, nil
}

// ReadActivity implements store.ActivityRollup.
func (p *Procedures) ReadActivity(ctx context.Context, width time.Duration, since, until time.Time, queue, kind string) ([]store.ActivityRow, error) {
	rs, err := p.reader.Query(ctx, `SELECT `+activityColumns+` FROM backstop_activity
		WHERE width_s = $1 AND bucket >= $2 AND bucket < $3 AND ($4 = '' OR queue = $4) AND ($5 = '' OR kind = $5)
		ORDER BY bucket, queue, kind`, int64(width/time.Second), since, until, queue, kind)
	if err != nil {
		return nil, fmt.Errorf("%s: read activity: %w", p.dialect.Prefix, err)
	}
	defer rs.Close()
	out := []store.ActivityRow{}
	for rs.Next() {
		r, err := scanActivity(rs)
		if err != nil {
			return nil, fmt.Errorf("%s: read activity: %w", p.dialect.Prefix, err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("%s: read activity: %w", p.dialect.Prefix, err)
	}
	return out, nil
}

// DeleteActivity implements store.ActivityRollup.
func (p *Procedures) DeleteActivity(ctx context.Context, width time.Duration, before time.Time) (int, error) {
	n, err := p.writer.Exec(ctx, `DELETE FROM backstop_activity WHERE width_s = $1 AND bucket < $2`, int64(width/time.Second), before)
	if err != nil {
		return 0, fmt.Errorf("%s: delete activity: %w", p.dialect.Prefix, p.dialect.Err(err))
	}
	return int(n), nil
}
