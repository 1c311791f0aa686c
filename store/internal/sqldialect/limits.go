package sqldialect

import (
	"context"
	"errors"
	"fmt"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

const limitColumns = `name, queue, kind, per, concurrency, created_at`

func scanLimits(rows Rows) ([]store.Limit, error) {
	defer rows.Close()
	out := []store.Limit{}
	for rows.Next() {
		var l store.Limit
		if err := rows.Scan(&l.Name, &l.Queue, &l.Kind, &l.Per, &l.Concurrency, &l.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// SetLimit implements store.Limits.
func (p *Procedures) SetLimit(ctx context.Context, l store.Limit, ev bt.Event) error {
	err := InTx(ctx, p.writer, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_limits (`+limitColumns+`) VALUES ($1, $2, $3, $4, $5, $6)
	ON CONFLICT (name) DO UPDATE SET queue = excluded.queue, kind = excluded.kind, per = excluded.per,
		concurrency = excluded.concurrency`,
			l.Name, l.Queue, l.Kind, l.Per, l.Concurrency, l.CreatedAt); err != nil {
			return err
		}
		// Workers of the queue may now claim more (a raised limit).
		if err := tx.Wake(ctx, l.Queue); err != nil {
			return err
		}
		return p.appendAudit(ctx, tx, ev)
	})
	if err != nil {
		return fmt.Errorf("%s: set limit: %w", p.dialect.Prefix, p.dialect.Err(err))
	}
	return nil
}

// RemoveLimit implements store.Limits.
func (p *Procedures) RemoveLimit(ctx context.Context, name string, ev bt.Event) (bool, error) {
	var removed bool
	err := InTx(ctx, p.writer, func(tx Tx) error {
		var queue string
		err := tx.QueryRow(ctx, `DELETE FROM backstop_limits WHERE name = $1 RETURNING queue`, name).Scan(&queue)
		if errors.Is(err, ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		removed = true
		if err := tx.Wake(ctx, queue); err != nil {
			return err
		}
		return p.appendAudit(ctx, tx, ev)
	})
	if err != nil {
		return false, fmt.Errorf("%s: remove limit: %w", p.dialect.Prefix, p.dialect.Err(err))
	}
	return removed, nil
}

// ListLimits implements store.Limits.
func (p *Procedures) ListLimits(ctx context.Context) ([]store.Limit, error) {
	rows, err := p.reader.Query(ctx, `SELECT `+limitColumns+` FROM backstop_limits ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("%s: limits: %w", p.dialect.Prefix, err)
	}
	ls, err := scanLimits(rows)
	if err != nil {
		return nil, fmt.Errorf("%s: limits: %w", p.dialect.Prefix, err)
	}
	return ls, nil
}

// limitValue is the SQL of a task's budget value under l (t: the task),
// its attribute's key the parameter param, and the arguments with that key
// added (when l has Per; without, the value is ” and takes no parameter).
func (p *Procedures) limitValue(l store.Limit, param string, args ...any) (string, []any) {
	if l.Per == "" {
		return "''", args
	}
	return "coalesce(" + p.dialect.JSONText("t.attributes", param) + ", '')", append(args, p.dialect.JSONKey(l.Per))
}

// LimitUses implements store.Limits.
func (p *Procedures) LimitUses(ctx context.Context) ([]store.LimitUse, error) {
	limits, err := p.ListLimits(ctx)
	if err != nil {
		return nil, err
	}
	out := []store.LimitUse{}
	for _, l := range limits {
		value, args := p.limitValue(l, "$3", l.Queue, l.Kind)
		rows, err := p.reader.Query(ctx, `SELECT `+value+` AS v,
	sum(CASE WHEN t.state = 'running' THEN 1 ELSE 0 END),
	sum(CASE WHEN t.state = 'pending' THEN 1 ELSE 0 END)
FROM backstop_tasks t
WHERE t.state IN ('running', 'pending') AND t.queue = $1 AND ($2 = '' OR t.kind = $2)
GROUP BY 1 ORDER BY 1`, args...)
		if err != nil {
			return nil, fmt.Errorf("%s: limit uses: %w", p.dialect.Prefix, err)
		}
		for rows.Next() {
			u := store.LimitUse{Limit: l.Name}
			if err := rows.Scan(&u.Value, &u.Running, &u.Pending); err != nil {
				rows.Close()
				return nil, fmt.Errorf("%s: limit uses: %w", p.dialect.Prefix, err)
			}
			if u.Running >= l.Concurrency {
				u.Waiting = u.Pending
			}
			if u.Running > 0 || u.Pending > 0 {
				out = append(out, u)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("%s: limit uses: %w", p.dialect.Prefix, err)
		}
	}
	return out, nil
}

// ClaimLimits reads, in q (the limited claim's transaction), the limits of
// queue, locking them until commit where the dialect locks rows (so the
// limited claims of a queue take turns, and each one's counts include the
// claims committed before it), and counts the running tasks of each of
// their budgets. No limits: nil.
func (p *Procedures) ClaimLimits(ctx context.Context, q Querier, queue string) ([]store.Limit, map[store.Budget]int, error) {
	rows, err := q.Query(ctx, `SELECT `+limitColumns+` FROM backstop_limits WHERE queue = $1 ORDER BY name`+p.dialect.ForUpdate, queue)
	if err != nil {
		return nil, nil, err
	}
	limits, err := scanLimits(rows)
	if err != nil || len(limits) == 0 {
		return nil, nil, err
	}
	running := map[store.Budget]int{}
	for _, l := range limits {
		value, args := p.limitValue(l, "$3", l.Queue, l.Kind)
		rows, err := q.Query(ctx, `SELECT `+value+`, count(*) FROM backstop_tasks t
WHERE t.state = 'running' AND t.queue = $1 AND ($2 = '' OR t.kind = $2) GROUP BY 1`, args...)
		if err != nil {
			return nil, nil, err
		}
		for rows.Next() {
			var (
				v string
				n int
			)
			if err := rows.Scan(&v, &n); err != nil {
				rows.Close()
				return nil, nil, err
			}
			running[store.Budget{Limit: l.Name, Value: v}] = n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
	}
	return limits, running, nil
}
