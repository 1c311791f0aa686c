package sqldialect

import (
	"context"
	"encoding/json"

	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop/store"
)

// SetFair implements store.Fairness.
func (p *Procedures) SetFair(ctx context.Context, f store.FairQueue) error {
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
		return tx.Wake(ctx, f.Queue)
	})
	p.forgetOneValue(f.Queue)
	if err != nil {
		return fmt.Errorf("%s: set fair: %w", p.dialect.Prefix, p.dialect.Err(err))
	}
	return nil
}

// RemoveFair implements store.Fairness.
func (p *Procedures) RemoveFair(ctx context.Context, queue string) (bool, error) {
	var removed bool
	err := InTx(ctx, p.writer, func(tx Tx) error {
		n, err := tx.Exec(ctx, `DELETE FROM backstop_fair_queues WHERE queue = $1`, queue)
		if err != nil {
			return err
		}
		removed = n > 0
		_, err = tx.Exec(ctx, `DELETE FROM backstop_fair_passes WHERE queue = $1`, queue)
		return err
	})
	p.forgetOneValue(queue)
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

// fairKey names the claims a one-value mark applies to: a queue and the
// kinds a claim asks for.
type fairKey struct{ queue, kinds string }

func fairKeyOf(cp store.ClaimParams) fairKey {
	return fairKey{cp.Queue, strings.Join(cp.Kinds, "\x00")}
}

// FairOneValue reports whether a fair claim of cp's queue and kinds, in
// this process, found one value waiting less than store.FairOneValueFor
// before cp.Now (the claims' clock): the claim then takes the plain path
// (the limited one when the queue has limits), which is the fair order of
// one value, without the fairness lock or the ranking.
func (p *Procedures) FairOneValue(cp store.ClaimParams) bool {
	t, ok := p.fairOne.Load(fairKeyOf(cp))
	if !ok {
		return false
	}
	at := t.(time.Time)
	return !cp.Now.Before(at) && cp.Now.Sub(at) < store.FairOneValueFor
}

// forgetOneValue drops the queue's one-value marks (its fairness changed).
func (p *Procedures) forgetOneValue(queue string) {
	p.fairOne.Range(func(k, _ any) bool {
		if k.(fairKey).queue == queue {
			p.fairOne.Delete(k)
		}
		return true
	})
}

// FairPlan reads, in q (the fair claim's transaction), the queue's
// fairness, locking its row until commit where the dialect locks rows (so
// the fair claims of a queue take turns); with cp.Limited, it then reads
// the queue's limits and budgets (ClaimLimits: locked after the fairness
// row, as every fair claim takes them). It picks up to cp.Max of the
// claimable tasks outside the full budgets in store.FairOrder, admitting
// each only while its budgets have room (store.AdmitWithinLimits), records
// the passes of the values it picked from and takes the picked tasks'
// tokens. fair is false when the queue is not fair (the caller claims as
// usual: the limited claim with cp.Limited). Only cp.Max tasks of each
// value and priority are read, the next ones. When exactly one value
// waits and no budget is full, it marks the queue's claims of these kinds
// one-value (FairOneValue).
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
	var (
		limits []store.Limit
		bs     *store.Budgets
		full   []store.Budget
	)
	if cp.Limited {
		if limits, bs, err = p.ClaimLimits(ctx, q, cp.Queue, cp.Now); err != nil {
			return nil, true, err
		}
		if bs != nil {
			full = bs.Full(limits)
		}
	}
	cands, err := p.fairCandidates(ctx, q, f, cp, limits, full)
	if err != nil || len(cands) == 0 {
		return nil, true, err
	}
	values := map[string]bool{}
	for _, c := range cands {
		values[c.Value] = true
	}
	if len(values) == 1 && len(full) == 0 {
		p.fairOne.Store(fairKeyOf(cp), cp.Now)
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
	var picked []store.FairCandidate
	for _, c := range store.FairOrder(f, cands, passes) {
		if len(picked) == cp.Max {
			break
		}
		if bs != nil && len(store.AdmitWithinLimits(cp.Queue, limits, bs, []store.LimitCandidate{{ID: c.ID, Kind: c.Kind, Attrs: c.Attrs}})) == 0 {
			continue
		}
		picked = append(picked, c)
		ids = append(ids, c.ID)
	}
	next := store.FairPasses(f, cands, passes, picked)
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
	if err := p.TakeTokens(ctx, q, limits, bs); err != nil {
		return nil, true, err
	}
	return ids, true, nil
}

// fairCandidates reads, in q, the next cp.Max claimable tasks of each
// value and priority of fair queue f, outside the full budgets of limits
// (with limits, each with its kind and attributes, for the admission).
func (p *Procedures) fairCandidates(ctx context.Context, q Querier, f store.FairQueue, cp store.ClaimParams, limits []store.Limit, full []store.Budget) ([]store.FairCandidate, error) {
	// Parameters are numbered in the order they first appear (SQLite
	// numbers $N parameters that way); the limit is a literal.
	value := "coalesce(" + p.dialect.JSONText("t.attributes", "$1") + ", '')"
	args := []any{p.dialect.JSONKey(f.By), cp.Queue, cp.Now}
	param := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	filter := ""
	if len(cp.Kinds) > 0 {
		ph := make([]string, len(cp.Kinds))
		for i, k := range cp.Kinds {
			ph[i] = param(k)
		}
		filter = " AND t.kind IN (" + strings.Join(ph, ", ") + ")"
	}
	// A full budget's tasks are skipped here, so a value held back by a
	// limit does not hide its other tasks (of other kinds) behind it.
	for _, b := range full {
		i := slices.IndexFunc(limits, func(l store.Limit) bool { return l.Name == b.Limit })
		l := limits[i]
		var conds []string
		if l.Kind != "" {
			conds = append(conds, "t.kind = "+param(l.Kind))
		}
		if l.Per != "" {
			key := param(p.dialect.JSONKey(l.Per))
			conds = append(conds, "coalesce("+p.dialect.JSONText("t.attributes", key)+", '') = "+param(b.Value))
		}
		if len(conds) == 0 {
			return nil, nil // the queue's whole budget is full
		}
		filter += " AND NOT (" + strings.Join(conds, " AND ") + ")"
	}
	extra := ""
	if len(limits) > 0 {
		extra = ", kind, attributes"
	}
	rows, err := q.Query(ctx, `SELECT id, priority, v, rn`+extra+` FROM (
	SELECT t.id, t.priority, t.kind, t.attributes, `+value+` AS v,
		row_number() OVER (PARTITION BY t.priority, `+value+` ORDER BY t.run_at, t.id) AS rn
	FROM backstop_tasks t
	WHERE t.state = 'pending' AND t.queue = $2 AND t.run_at <= $3 AND (t.deadline IS NULL OR t.deadline > $3)`+filter+`
	  AND NOT EXISTS (SELECT 1 FROM backstop_queues pq WHERE pq.name = $2)
) c WHERE rn <= `+strconv.Itoa(cp.Max), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cands []store.FairCandidate
	for rows.Next() {
		var c store.FairCandidate
		dest := []any{&c.ID, &c.Priority, &c.Value, &c.Rank}
		var attrs []byte
		if len(limits) > 0 {
			dest = append(dest, &c.Kind, &attrs)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if len(attrs) > 0 {
			if err := json.Unmarshal(attrs, &c.Attrs); err != nil {
				return nil, fmt.Errorf("task %s: attributes: %w", c.ID, err)
			}
		}
		cands = append(cands, c)
	}
	return cands, rows.Err()
}
