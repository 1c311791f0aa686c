package sqldialect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

// This file is store.Ops's leadership leases (retention, statistics and
// views stay in each driver).

// sqlTryLead takes the lease when free or expired, renews it when $2 holds
// it; it returns a row only when $2 holds it afterwards. Concurrent callers
// serialise on the row (PostgreSQL) or on the writer (SQLite's BEGIN
// IMMEDIATE), so at most one holds it.
const sqlTryLead = `INSERT INTO backstop_leaders (name, leader_id, elected_at, expires_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET
	elected_at = CASE WHEN backstop_leaders.leader_id = excluded.leader_id
		THEN backstop_leaders.elected_at ELSE excluded.elected_at END,
	leader_id = excluded.leader_id,
	expires_at = excluded.expires_at
WHERE backstop_leaders.leader_id = excluded.leader_id OR backstop_leaders.expires_at <= excluded.elected_at
RETURNING leader_id`

// TryLead implements store.Ops with one conditional upsert.
func (p *Procedures) TryLead(ctx context.Context, name, id string, now time.Time, ttl time.Duration) (bool, error) {
	d, q := p.dialect, p.writer
	var holder string
	err := q.QueryRow(ctx, sqlTryLead, name, id, now, now.Add(ttl)).Scan(&holder)
	if errors.Is(err, ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: try lead %s: %w", d.Prefix, name, d.Err(err))
	}
	return holder == id, nil
}

// ResignLead implements store.Ops.
func (p *Procedures) ResignLead(ctx context.Context, name, id string) error {
	d, q := p.dialect, p.writer
	if _, err := q.Exec(ctx, `DELETE FROM backstop_leaders WHERE name = $1 AND leader_id = $2`, name, id); err != nil {
		return fmt.Errorf("%s: resign %s: %w", d.Prefix, name, d.Err(err))
	}
	return nil
}

// Leader implements store.Ops.
func (p *Procedures) Leader(ctx context.Context, name string) (*store.Leader, error) {
	d, q := p.dialect, p.reader
	ls, err := d.Leaders(ctx, q, name)
	if err != nil {
		return nil, err
	}
	if len(ls) == 0 {
		return nil, fmt.Errorf("%s: leader %q: %w", d.Prefix, name, store.ErrNotFound)
	}
	return &ls[0], nil
}

// Leaders reads the lease named name, or all with an empty name.
func (d *Dialect) Leaders(ctx context.Context, q Querier, name string) ([]store.Leader, error) {
	rows, err := q.Query(ctx, `SELECT name, leader_id, elected_at, expires_at FROM backstop_leaders
		WHERE $1 = '' OR name = $1 ORDER BY name`, name)
	if err != nil {
		return nil, fmt.Errorf("%s: leaders: %w", d.Prefix, d.Err(err))
	}
	defer rows.Close()
	out := []store.Leader{}
	for rows.Next() {
		var l store.Leader
		if err := rows.Scan(&l.Name, &l.LeaderID, &l.ElectedAt, &l.ExpiresAt); err != nil {
			return nil, fmt.Errorf("%s: leaders: %w", d.Prefix, err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
