package sqldialect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/backstophq/backstop/store"
)

// This file is the redrive records' reads and each item's outcome
// (backstop_redrive_items): the per-item report of issue 17.

// UpsertRedriveItemSQL records one item's outcome ($1 redrive, $2 task, $3
// outcome, $4 detail, $5 at); a later outcome for the same item replaces
// the earlier one.
const UpsertRedriveItemSQL = `INSERT INTO backstop_redrive_items (redrive_id, task_id, outcome, detail, at)
	VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (redrive_id, task_id) DO UPDATE SET outcome = excluded.outcome, detail = excluded.detail, at = excluded.at
	WHERE backstop_redrive_items.outcome <> 'replayed'`

// RecordRedriveItem implements store.DLQ.
func (p *Procedures) RecordRedriveItem(ctx context.Context, it store.RedriveItem, failed int) error {
	return InTx(ctx, p.writer, func(tx Tx) error {
		if _, err := tx.Exec(ctx, UpsertRedriveItemSQL, it.RedriveID, it.TaskID, it.Outcome, it.Detail, it.At); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE backstop_redrives SET cursor = $1, failed = failed + $2 WHERE id = $3`,
			it.TaskID, failed, it.RedriveID)
		return err
	})
}

const redriveCols = `id, filter_key, filter, snapshot, cursor, replayed, failed, status, started_at, finished_at, runner, heartbeat_at, kind`

func scanRedrive(r Row) (store.Redrive, error) {
	var (
		rec    store.Redrive
		filter []byte
	)
	err := r.Scan(&rec.ID, &rec.FilterKey, &filter, &rec.Snapshot, &rec.Cursor, &rec.Replayed, &rec.Failed, &rec.Status, &rec.StartedAt, &rec.FinishedAt,
		&rec.Runner, &rec.HeartbeatAt, &rec.Kind)
	rec.Filter = filter
	return rec, err
}

// GetRedrive implements store.DLQ.
func (p *Procedures) GetRedrive(ctx context.Context, id string) (store.Redrive, error) {
	rec, err := scanRedrive(p.reader.QueryRow(ctx, `SELECT `+redriveCols+` FROM backstop_redrives WHERE id = $1`, id))
	if errors.Is(err, ErrNoRows) {
		return rec, fmt.Errorf("redrive %q: %w", id, store.ErrNotFound)
	}
	return rec, err
}

// Redrives implements store.DLQ.
func (p *Procedures) Redrives(ctx context.Context, before string, limit int) ([]store.Redrive, error) {
	if limit <= 0 {
		limit = 100
	}
	q, args := `SELECT `+redriveCols+` FROM backstop_redrives ORDER BY started_at DESC, id DESC LIMIT $1`, []any{limit}
	if before != "" {
		q = `SELECT ` + redriveCols + ` FROM backstop_redrives
			WHERE (started_at, id) < (SELECT started_at, id FROM backstop_redrives WHERE id = $2)
			ORDER BY started_at DESC, id DESC LIMIT $1`
		args = append(args, before)
	}
	rs, err := p.reader.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := []store.Redrive{}
	for rs.Next() {
		rec, err := scanRedrive(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, rs.Err()
}

// RedriveItems implements store.DLQ.
func (p *Procedures) RedriveItems(ctx context.Context, q store.RedriveItemsQuery) ([]store.RedriveItem, error) {
	d := p.dialect
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	sql := `SELECT redrive_id, task_id, outcome, detail, at FROM backstop_redrive_items
		WHERE redrive_id = $1 AND task_id > $2`
	args := []any{q.RedriveID, q.AfterID, limit}
	if len(q.Outcomes) > 0 {
		sql += ` AND outcome ` + d.InText("$4")
		args = append(args, d.TextList(q.Outcomes))
		if !slices.Contains(q.Outcomes, store.OutcomeReplayed) {
			sql += ` AND outcome <> 'replayed'` // the index by outcome holds these only
		}
	}
	rs, err := p.reader.Query(ctx, sql+` ORDER BY task_id LIMIT $3`, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := []store.RedriveItem{}
	for rs.Next() {
		var it store.RedriveItem
		if err := rs.Scan(&it.RedriveID, &it.TaskID, &it.Outcome, &it.Detail, &it.At); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, rs.Err()
}

// sqlRedriveOutcomes counts a redrive's items ($1) by outcome, in one
// statement so that the counts agree: the failed ones from the index by
// outcome, which holds only those, the replayed ones as all the items (the
// primary key) less the failed ones. Outcomes without items are left out.
const sqlRedriveOutcomes = `WITH failed AS (
	SELECT outcome, count(*) AS n FROM backstop_redrive_items WHERE redrive_id = $1 AND outcome <> 'replayed' GROUP BY outcome)
SELECT outcome, n FROM failed
UNION ALL
SELECT 'replayed', n FROM (SELECT count(*) - (SELECT CAST(coalesce(sum(n), 0) AS bigint) FROM failed) AS n
	FROM backstop_redrive_items WHERE redrive_id = $1) r WHERE n > 0`

// RedriveOutcomes implements store.DLQ.
func (p *Procedures) RedriveOutcomes(ctx context.Context, id string) (map[string]int, error) {
	rs, err := p.reader.Query(ctx, sqlRedriveOutcomes, id)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[string]int{}
	for rs.Next() {
		var (
			o string
			n int
		)
		if err := rs.Scan(&o, &n); err != nil {
			return nil, err
		}
		out[o] = n
	}
	return out, rs.Err()
}

// SetRedriveStatus implements store.DLQ.
func (p *Procedures) SetRedriveStatus(ctx context.Context, id string, from []string, status string, at time.Time) (bool, error) {
	d := p.dialect
	var finished *time.Time
	if status != "running" {
		finished = &at
	}
	n, err := p.writer.Exec(ctx, `UPDATE backstop_redrives SET status = $1, finished_at = $2
		WHERE id = $3 AND status `+d.InText("$4"), status, finished, id, d.TextList(from))
	if err != nil || n > 0 {
		return n > 0, err
	}
	if _, err := p.GetRedrive(ctx, id); err != nil {
		return false, err
	}
	return false, nil
}

// ClaimRedrive implements store.DLQ.
func (p *Procedures) ClaimRedrive(ctx context.Context, c store.RedriveClaim) (store.Redrive, bool, error) {
	q := `UPDATE backstop_redrives SET runner = $1, heartbeat_at = $2 WHERE id = $3`
	args := []any{c.Runner, c.At, c.ID}
	switch {
	case c.Renew:
		q += ` AND runner = $1`
	case !c.Force:
		q += ` AND (runner = '' OR runner = $1 OR heartbeat_at IS NULL OR heartbeat_at < $4)`
		args = append(args, c.StaleBefore)
	}
	n, err := p.writer.Exec(ctx, q, args...)
	if err != nil {
		return store.Redrive{}, false, err
	}
	rec, err := p.GetRedrive(ctx, c.ID)
	return rec, n > 0, err
}

// ReleaseRedrive implements store.DLQ.
func (p *Procedures) ReleaseRedrive(ctx context.Context, id, runner string) error {
	_, err := p.writer.Exec(ctx, `UPDATE backstop_redrives SET runner = '' WHERE id = $1 AND runner = $2`, id, runner)
	return err
}
