package sqldialect

import (
	"context"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

const limitColumns = `name, queue, kind, per, concurrency, rate, burst, created_at`

func scanLimits(rows Rows) ([]store.Limit, error) {
	defer rows.Close()
	out := []store.Limit{}
	for rows.Next() {
		var l store.Limit
		if err := rows.Scan(&l.Name, &l.Queue, &l.Kind, &l.Per, &l.Concurrency, &l.Rate, &l.Burst, &l.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// SetLimit implements store.Limits.
func (p *Procedures) SetLimit(ctx context.Context, l store.Limit, ev bt.Event) error {
	err := InTx(ctx, p.writer, func(tx Tx) error {
		// A rate limit kept on the same scope keeps its buckets (a
		// configuration applied again at every start grants no new
		// burst; a lower burst caps them when read); any other change
		// starts them full.
		if _, err := tx.Exec(ctx, `DELETE FROM backstop_limit_buckets WHERE limit_name = $1 AND NOT EXISTS (
	SELECT 1 FROM backstop_limits WHERE name = $1 AND queue = $2 AND kind = $3 AND per = $4 AND rate > 0 AND $5 > 0)`,
			l.Name, l.Queue, l.Kind, l.Per, l.Rate); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_limits (`+limitColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	ON CONFLICT (name) DO UPDATE SET queue = excluded.queue, kind = excluded.kind, per = excluded.per,
		concurrency = excluded.concurrency, rate = excluded.rate, burst = excluded.burst`,
			l.Name, l.Queue, l.Kind, l.Per, l.Concurrency, l.Rate, l.Burst, l.CreatedAt); err != nil {
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
		if _, err := tx.Exec(ctx, `DELETE FROM backstop_limit_buckets WHERE limit_name = $1`, name); err != nil {
			return err
		}
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
func (p *Procedures) LimitUses(ctx context.Context, now time.Time) ([]store.LimitUse, error) {
	limits, err := p.ListLimits(ctx)
	if err != nil {
		return nil, err
	}
	out := []store.LimitUse{}
	for _, l := range limits {
		var buckets map[string]store.Bucket
		if l.Rate > 0 {
			if buckets, err = p.buckets(ctx, p.reader, l.Name, time.Time{}); err != nil {
				return nil, fmt.Errorf("%s: limit uses: %w", p.dialect.Prefix, err)
			}
		}
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
			full := u.Running >= l.Concurrency
			if l.Rate > 0 {
				st, ok := buckets[u.Value]
				tokens := l.Tokens(st, ok, now)
				u.Tokens, full = &tokens, !store.WholeToken(tokens)
			}
			if full {
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
// claims committed before it), and reads their budgets at now: the running
// tasks of each concurrency budget, the stored buckets of each rate budget
// that is not full again. No limits: nil.
func (p *Procedures) ClaimLimits(ctx context.Context, q Querier, queue string, now time.Time) ([]store.Limit, *store.Budgets, error) {
	rows, err := q.Query(ctx, `SELECT `+limitColumns+` FROM backstop_limits WHERE queue = $1 ORDER BY name`+p.dialect.ForUpdate, queue)
	if err != nil {
		return nil, nil, err
	}
	limits, err := scanLimits(rows)
	if err != nil || len(limits) == 0 {
		return nil, nil, err
	}
	bs := store.NewBudgets(now)
	for _, l := range limits {
		if l.Rate > 0 {
			// A bucket last stored Burst/Rate ago is full again, as if absent.
			refill := time.Duration(float64(l.Burst) / l.Rate * float64(time.Second))
			buckets, err := p.buckets(ctx, q, l.Name, now.Add(-refill))
			if err != nil {
				return nil, nil, err
			}
			for v, b := range buckets {
				bs.Buckets[store.Budget{Limit: l.Name, Value: v}] = b
			}
			continue
		}
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
			bs.Running[store.Budget{Limit: l.Name, Value: v}] = n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
	}
	return limits, bs, nil
}

// buckets reads the stored token buckets of rate limit name, by value,
// those stored after since.
func (p *Procedures) buckets(ctx context.Context, q Querier, name string, since time.Time) (map[string]store.Bucket, error) {
	rows, err := q.Query(ctx, `SELECT value, tokens, updated_at FROM backstop_limit_buckets
WHERE limit_name = $1 AND updated_at > $2`, name, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]store.Bucket{}
	for rows.Next() {
		var (
			v string
			b store.Bucket
		)
		if err := rows.Scan(&v, &b.Tokens, &b.At); err != nil {
			return nil, err
		}
		out[v] = b
	}
	return out, rows.Err()
}

// TakeTokens stores, in q (the limited claim's transaction, which holds
// the limits' lock), the buckets the claim took tokens of.
func (p *Procedures) TakeTokens(ctx context.Context, q Querier, limits []store.Limit, bs *store.Budgets) error {
	if bs == nil {
		return nil
	}
	for b, st := range bs.Spent(limits) {
		if _, err := q.Exec(ctx, `INSERT INTO backstop_limit_buckets (limit_name, value, tokens, updated_at) VALUES ($1, $2, $3, $4)
	ON CONFLICT (limit_name, value) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at`,
			b.Limit, b.Value, st.Tokens, st.At); err != nil {
			return err
		}
	}
	return nil
}
