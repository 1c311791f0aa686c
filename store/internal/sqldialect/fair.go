package sqldialect

import (
	"context"
	"encoding/json"

	"fmt"
	"strconv"
	"strings"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// SetFair implements store.Fairness.
func (p *Procedures) SetFair(ctx context.Context, f store.FairQueue, ev bt.Event) error {
	weights, err := json.Marshal(f.Weights)
	if err != nil {
		return err
	}
	if f.Weights == nil {
		weights = []byte("{}")
	}
	err = InTx(ctx, p.writer, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_fair_queues (queue, by_attr, weights, created_at) VALUES ($1, $2, $3, $4)
	ON CONFLICT (queue) DO UPDATE SET by_attr = excluded.by_attr, weights = excluded.weights`,
			f.Queue, f.By, string(weights), f.CreatedAt); err != nil {
			return err
		}
		// The rotation starts afresh under the new attribute or weights.
		if _, err := tx.Exec(ctx, `DELETE FROM backstop_fair_passes WHERE queue = $1`, f.Queue); err != nil {
			return err
		}
		if err := tx.Wake(ctx, f.Queue); err != nil {
			return err
		}
		return p.appendAudit(ctx, tx, ev)
	})
	if err != nil {
		return fmt.Errorf("%s: set fair: %w", p.dialect.Prefix, p.dialect.Err(err))
	}
	return nil
}

// RemoveFair implements store.Fairness.
func (p *Procedures) RemoveFair(ctx context.Context, queue string, ev bt.Event) (bool, error) {
	var removed bool
	err := InTx(ctx, p.writer, func(tx Tx) error {
		n, err := tx.Exec(ctx, `DELETE FROM backstop_fair_queues WHERE queue = $1`, queue)
		if err != nil {
			return err
		}
		removed = n > 0
		if _, err = tx.Exec(ctx, `DELETE FROM backstop_fair_passes WHERE queue = $1`, queue); err != nil || !removed {
			return err
		}
		return p.appendAudit(ctx, tx, ev)
	})
	if err != nil {
		return false, fmt.Errorf("%s: remove fair: %w", p.dialect.Prefix, p.dialect.Err(err))
	}
	return removed, nil
}

// ListFair implements store.Fairness.
func (p *Procedures) ListFair(ctx context.Context) ([]store.FairQueue, error) {
	rows, err := p.reader.Query(ctx, `SELECT queue, by_attr, weights, created_at FROM backstop_fair_queues ORDER BY queue`)
	if err != nil {
		return nil, fmt.Errorf("%s: fair queues: %w", p.dialect.Prefix, err)
	}
	out, err := scanFair(rows)
	if err != nil {
		return nil, fmt.Errorf("%s: fair queues: %w", p.dialect.Prefix, err)
	}
	return out, nil
}

func scanFair(rows Rows) ([]store.FairQueue, error) {
	defer rows.Close()
	out := []store.FairQueue{}
	for rows.Next() {
		var (
			f       store.FairQueue
			weights string
		)
		if err := rows.Scan(&f.Queue, &f.By, &weights, &f.CreatedAt); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(weights), &f.Weights); err != nil {
			return nil, fmt.Errorf("fair queue %s: weights: %w", f.Queue, err)
		}
		if len(f.Weights) == 0 {
			f.Weights = nil
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// FairPlan reads, in q (the fair claim's transaction), the queue's
// fairness, locking its row until commit where the dialect locks rows (so
// the fair claims of a queue take turns), picks up to p.Max of its
// claimable tasks by store.FairPick and records the picked values' passes.
// fair is false when the queue is not fair (the caller claims as usual).
// Only p.Max tasks of each value and priority are read, the next ones.
func (p *Procedures) FairPlan(ctx context.Context, q Querier, cp store.ClaimParams) (ids []string, fair bool, err error) {
	rows, err := q.Query(ctx, `SELECT queue, by_attr, weights, created_at FROM backstop_fair_queues WHERE queue = $1`+p.dialect.ForUpdate, cp.Queue)
	if err != nil {
		return nil, false, err
	}
	fs, err := scanFair(rows)
	if err != nil || len(fs) == 0 {
		return nil, false, err
	}
	f := fs[0]
	// Parameters are numbered in the order they first appear (SQLite
	// numbers $N parameters that way); the limit is a literal.
	value := "coalesce(" + p.dialect.JSONText("t.attributes", "$1") + ", '')"
	args := []any{p.dialect.JSONKey(f.By), cp.Queue, cp.Now}
	kinds := ""
	if len(cp.Kinds) > 0 {
		ph := make([]string, len(cp.Kinds))
		for i, k := range cp.Kinds {
			args = append(args, k)
			ph[i] = "$" + strconv.Itoa(len(args))
		}
		kinds = " AND t.kind IN (" + strings.Join(ph, ", ") + ")"
	}
	rows, err = q.Query(ctx, `SELECT id, priority, v, rn FROM (
	SELECT t.id, t.priority, `+value+` AS v,
		row_number() OVER (PARTITION BY t.priority, `+value+` ORDER BY t.run_at, t.id) AS rn
	FROM backstop_tasks t
	WHERE t.state = 'pending' AND t.queue = $2 AND t.run_at <= $3 AND (t.deadline IS NULL OR t.deadline > $3)`+kinds+`
	  AND NOT EXISTS (SELECT 1 FROM backstop_queues pq WHERE pq.name = $2)
) c WHERE rn <= `+strconv.Itoa(cp.Max), args...)
	if err != nil {
		return nil, true, err
	}
	var cands []store.FairCandidate
	values := map[string]bool{}
	for rows.Next() {
		var c store.FairCandidate
		if err := rows.Scan(&c.ID, &c.Priority, &c.Value, &c.Rank); err != nil {
			rows.Close()
			return nil, true, err
		}
		cands = append(cands, c)
		values[c.Value] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(cands) == 0 {
		return nil, true, err
	}
	passes := map[string]float64{}
	rows, err = q.Query(ctx, `SELECT value, pass FROM backstop_fair_passes WHERE queue = $1`, cp.Queue)
	if err != nil {
		return nil, true, err
	}
	for rows.Next() {
		var (
			v    string
			pass float64
		)
		if err := rows.Scan(&v, &pass); err != nil {
			rows.Close()
			return nil, true, err
		}
		if values[v] {
			passes[v] = pass
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, true, err
	}
	ids, next := store.FairPick(f, cands, passes, cp.Max)
	// Values with nothing waiting are forgotten: back, they start afresh.
	waiting := make([]string, 0, len(values))
	for v := range values {
		waiting = append(waiting, v)
	}
	if _, err := q.Exec(ctx, `DELETE FROM backstop_fair_passes WHERE queue = $1 AND NOT (value `+p.dialect.InText("$2")+`)`,
		cp.Queue, p.dialect.TextList(waiting)); err != nil {
		return nil, true, err
	}
	for v, pass := range next {
		if _, err := q.Exec(ctx, `INSERT INTO backstop_fair_passes (queue, value, pass) VALUES ($1, $2, $3)
	ON CONFLICT (queue, value) DO UPDATE SET pass = excluded.pass`, cp.Queue, v, pass); err != nil {
			return nil, true, err
		}
	}
	return ids, true, nil
}
