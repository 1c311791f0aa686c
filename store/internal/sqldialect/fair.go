package sqldialect

import (
	"context"
	"encoding/json"

	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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
	var was []store.FairQueue
	err = InTx(ctx, p.writer, func(tx Tx) error {
		rows, err := tx.Query(ctx, `SELECT queue, by_attr, weights, created_at FROM backstop_fair_queues WHERE queue = $1`, f.Queue)
		if err != nil {
			return err
		}
		if was, err = scanFair(rows); err != nil {
			return err
		}
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
	p.forgetOneValue(f.Queue)
	if err != nil {
		return fmt.Errorf("%s: set fair: %w", p.dialect.Prefix, p.dialect.Err(err))
	}
	if len(was) > 0 && was[0].By != f.By {
		p.dropFairIndex(ctx, was[0])
	}
	// Without its index (the role may not create indexes) the queue is
	// fair all the same: its claims count the whole queue instead.
	_ = p.createFairIndex(ctx, f)
	return nil
}

// RemoveFair implements store.Fairness.
func (p *Procedures) RemoveFair(ctx context.Context, queue string, ev bt.Event) (bool, error) {
	var was []store.FairQueue
	err := InTx(ctx, p.writer, func(tx Tx) error {
		rows, err := tx.Query(ctx, `SELECT queue, by_attr, weights, created_at FROM backstop_fair_queues WHERE queue = $1`, queue)
		if err != nil {
			return err
		}
		if was, err = scanFair(rows); err != nil || len(was) == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM backstop_fair_queues WHERE queue = $1`, queue); err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, `DELETE FROM backstop_fair_passes WHERE queue = $1`, queue); err != nil {
			return err
		}
		return p.appendAudit(ctx, tx, ev)
	})
	p.forgetOneValue(queue)
	if err != nil {
		return false, fmt.Errorf("%s: remove fair: %w", p.dialect.Prefix, p.dialect.Err(err))
	}
	if len(was) == 0 {
		return false, nil
	}
	p.dropFairIndex(ctx, was[0])
	return true, nil
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

// oneValueMark: a fair claim found one value waiting at At; renewing is
// set while one claim checks whether that still holds.
type oneValueMark struct {
	at       time.Time
	renewing atomic.Bool
}

// marked reports whether the mark of cp's queue and kinds is less than
// store.FairOneValueFor old at cp.Now (the claims' clock).
func (p *Procedures) marked(cp store.ClaimParams) (*oneValueMark, bool) {
	v, ok := p.fairOne.Load(fairKeyOf(cp))
	if !ok {
		return nil, false
	}
	m := v.(*oneValueMark)
	return m, !cp.Now.Before(m.at) && cp.Now.Sub(m.at) < store.FairOneValueFor
}

// FairOneValue reports whether a claim of cp's queue and kinds may take the
// plain path (the limited one when the queue has limits), which is the fair
// order of one value, without the fairness lock or the ranking: a fair
// claim of this process found one value waiting less than
// store.FairOneValueFor before cp.Now. When that mark is older, one claim
// checks, without the lock (on the reader), whether one value still waits
// and renews the mark if so; the claims that arrive meanwhile go on as
// marked. A limited claim does not renew it (full budgets are read under
// the lock: its fair claim marks the queue again when it may).
func (p *Procedures) FairOneValue(ctx context.Context, cp store.ClaimParams) bool {
	m, ok := p.marked(cp)
	switch {
	case ok:
		return true
	case m == nil:
		return false
	case !m.renewing.CompareAndSwap(false, true):
		return true // another claim is renewing it
	}
	one := !cp.Limited && p.oneValueWaiting(ctx, cp)
	if one {
		p.fairOne.Store(fairKeyOf(cp), &oneValueMark{at: cp.Now})
	} else {
		p.fairOne.CompareAndDelete(fairKeyOf(cp), m)
	}
	return one
}

// oneValueWaiting reports whether the claimable tasks of cp's queue and
// kinds, read on the reader, all have one value of the queue's attribute
// (false when there are none, the queue is not fair, or the read fails:
// the fair claim then decides under its lock).
func (p *Procedures) oneValueWaiting(ctx context.Context, cp store.ClaimParams) bool {
	rows, err := p.reader.Query(ctx, `SELECT queue, by_attr, weights, created_at FROM backstop_fair_queues WHERE queue = $1`, cp.Queue)
	if err != nil {
		return false
	}
	fs, err := scanFair(rows)
	if err != nil || len(fs) == 0 {
		return false
	}
	w := p.fairWhere(fs[0], cp, nil, nil)
	var least, most *string
	if err := p.reader.QueryRow(ctx, `SELECT min(v), max(v) FROM (SELECT `+w.value+` AS v FROM backstop_tasks t WHERE `+w.where+`) c`,
		w.args...).Scan(&least, &most); err != nil {
		return false
	}
	return least != nil && most != nil && *least == *most
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
// tokens. fair is false when the queue is not fair or one value waits
// (the caller claims as usual: the limited claim with cp.Limited; with
// one value that is the fair order). It counts the claimable
// tasks of each value and priority, works out each one's share of the
// claim from the counts (store.FairShares) and reads only those tasks,
// the next ones of each. When exactly one value waits and no budget is
// full, it marks the queue's claims of these kinds one-value
// (FairOneValue) and answers not fair.
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
	if _, ok := p.marked(cp); ok {
		return nil, false, nil // marked while this claim waited for the lock
	}
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
	w := p.fairWhere(f, cp, limits, full)
	if w.none {
		return nil, true, nil
	}
	var (
		indexed = p.fairIndexed(ctx, q, f, cp.Now)
		streams []store.FairStream
		lines   []store.FairLine
	)
	if indexed {
		streams, err = p.fairHeads(ctx, q, w)
		for _, s := range streams {
			lines = append(lines, store.FairLine{Priority: s.Head, Value: s.Value})
		}
	} else {
		lines, err = fairLines(ctx, q, w)
	}
	if err != nil {
		p.fairIdx.Delete(fairIndexName(f)) // looked for again by the next claim
		return nil, true, err
	}
	if len(lines) == 0 {
		return nil, true, nil
	}
	valueSet := map[string]bool{}
	var values []string
	for _, l := range lines {
		if !valueSet[l.Value] {
			valueSet[l.Value] = true
			values = append(values, l.Value)
		}
	}
	passes := map[string]float64{}
	var idle []string
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
		if valueSet[v] {
			passes[v] = pass
		} else {
			idle = append(idle, v)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, true, err
	}
	// Values with nothing waiting are forgotten: back, they start afresh.
	if len(idle) > 0 {
		if _, err := q.Exec(ctx, `DELETE FROM backstop_fair_passes WHERE queue = $1 AND value `+p.dialect.InText("$2"),
			cp.Queue, p.dialect.TextList(idle)); err != nil {
			return nil, true, err
		}
	}
	if len(values) == 1 && len(full) == 0 {
		p.fairOne.Store(fairKeyOf(cp), &oneValueMark{at: cp.Now})
		return nil, false, nil
	}
	base := store.FairBase(values, passes)
	var cands []store.FairCandidate
	if indexed {
		cands, err = p.fairRead(ctx, q, w, f, streams, passes, base, cp.Max, len(limits) > 0)
	} else {
		cands, err = fairCandidates(ctx, q, w, store.FairShares(f, lines, passes, base, cp.Max), len(limits) > 0)
	}
	if err != nil {
		return nil, true, err
	}
	order := store.FairOrder(f, cands, passes, base)
	order = order[:min(len(order), cp.Max)] // the claim's picks (fairRead may read more)
	var picked []store.FairCandidate
	for _, c := range order {
		if len(picked) == cp.Max {
			break
		}
		if bs != nil && len(store.AdmitWithinLimits(cp.Queue, limits, bs, []store.LimitCandidate{{ID: c.ID, Kind: c.Kind, Attrs: c.Attrs}})) == 0 {
			continue
		}
		picked = append(picked, c)
		ids = append(ids, c.ID)
	}
	next := store.FairPasses(f, values, passes, base, picked)
	if err := storePasses(ctx, q, cp.Queue, next); err != nil {
		return nil, true, err
	}
	if err := p.TakeTokens(ctx, q, limits, bs); err != nil {
		return nil, true, err
	}
	return ids, true, nil
}

// storePasses upserts the passes of queue's values, a few hundred a
// statement.
func storePasses(ctx context.Context, q Querier, queue string, passes map[string]float64) error {
	values := slices.Sorted(maps.Keys(passes))
	for len(values) > 0 {
		chunk := values[:min(len(values), 300)]
		values = values[len(chunk):]
		args := []any{queue}
		rows := make([]string, len(chunk))
		for i, v := range chunk {
			args = append(args, v, passes[v])
			rows[i] = fmt.Sprintf("($1, $%d, $%d)", len(args)-1, len(args))
		}
		if _, err := q.Exec(ctx, `INSERT INTO backstop_fair_passes (queue, value, pass) VALUES `+strings.Join(rows, ", ")+`
	ON CONFLICT (queue, value) DO UPDATE SET pass = excluded.pass`, args...); err != nil {
			return err
		}
	}
	return nil
}

// fairFilter is the claimable tasks of a fair claim in SQL: value is a
// task's (t) value of the attribute, where the condition after FROM
// backstop_tasks t, args their parameters; none: nothing is claimable.
type fairFilter struct {
	value, where string
	// indexed is the tasks table (as t) read through the queue's fair
	// index, for the queries that read it (fairHeads, fairStreams).
	indexed string
	args    []any
	none    bool
}

// fairWhere is the claimable tasks of fair queue f for cp, outside the
// full budgets of limits.
func (p *Procedures) fairWhere(f store.FairQueue, cp store.ClaimParams, limits []store.Limit, full []store.Budget) fairFilter {
	// Parameters are numbered in the order they first appear (SQLite
	// numbers $N parameters that way).
	w := fairFilter{value: p.fairValue(f.By, "t."), args: []any{cp.Queue, cp.Now}, indexed: "backstop_tasks t"}
	if p.dialect.IndexedBy != nil {
		w.indexed += p.dialect.IndexedBy(fairIndexName(f))
	}
	param := func(v any) string {
		w.args = append(w.args, v)
		return "$" + strconv.Itoa(len(w.args))
	}
	// The attribute's key and the queue are written out, so that the
	// queue's fair index (its expression and its WHERE) matches.
	w.where = `NOT EXISTS (SELECT 1 FROM backstop_queues pq WHERE pq.name = $1)
	  AND t.state = 'pending' AND t.queue = ` + sqlText(cp.Queue) + ` AND t.run_at <= $2 AND (t.deadline IS NULL OR t.deadline > $2)`
	if len(cp.Kinds) > 0 {
		ph := make([]string, len(cp.Kinds))
		for i, k := range cp.Kinds {
			ph[i] = param(k)
		}
		w.where += " AND t.kind IN (" + strings.Join(ph, ", ") + ")"
	}
	// A full budget's tasks are skipped here, so a value held back by a
	// limit does not hide its other tasks (of other kinds) behind it.
	for _, b := range full {
		l := limits[slices.IndexFunc(limits, func(l store.Limit) bool { return l.Name == b.Limit })]
		var conds []string
		if l.Kind != "" {
			conds = append(conds, "t.kind = "+param(l.Kind))
		}
		if l.Per != "" {
			key := param(p.dialect.JSONKey(l.Per))
			conds = append(conds, "coalesce("+p.dialect.JSONText("t.attributes", key)+", '') = "+param(b.Value))
		}
		if len(conds) == 0 {
			return fairFilter{none: true} // the queue's whole budget is full
		}
		w.where += " AND NOT (" + strings.Join(conds, " AND ") + ")"
	}
	return w
}

// fairLines counts the claimable tasks of each value and priority.
func fairLines(ctx context.Context, q Querier, w fairFilter) ([]store.FairLine, error) {
	rows, err := q.Query(ctx, `SELECT t.priority, `+w.value+`, count(*) FROM backstop_tasks t WHERE `+w.where+`
GROUP BY t.priority, `+w.value, w.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lines []store.FairLine
	for rows.Next() {
		var l store.FairLine
		if err := rows.Scan(&l.Priority, &l.Value, &l.N); err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, rows.Err()
}

// fairCandidates reads the next tasks of each line, as many as its share
// (with kind and attributes, for the limits' admission, when limited).
func fairCandidates(ctx context.Context, q Querier, w fairFilter, shares map[store.FairLine]int, limited bool) ([]store.FairCandidate, error) {
	if len(shares) == 0 {
		return nil, nil
	}
	args := slices.Clone(w.args)
	most := 0
	rows := make([]string, 0, len(shares))
	for l, n := range shares {
		args = append(args, l.Priority, l.Value, n)
		rows = append(rows, fmt.Sprintf("(CAST($%d AS integer), CAST($%d AS text), CAST($%d AS integer))", len(args)-2, len(args)-1, len(args)))
		most = max(most, n)
	}
	extra := ""
	if limited {
		extra = ", c.kind, c.attributes"
	}
	rs, err := q.Query(ctx, `SELECT c.id, c.priority, c.v, c.rn`+extra+` FROM (
	SELECT t.id, t.priority, t.kind, t.attributes, `+w.value+` AS v,
		row_number() OVER (PARTITION BY t.priority, `+w.value+` ORDER BY t.run_at, t.id) AS rn
	FROM backstop_tasks t
	WHERE `+w.where+`
) c JOIN (VALUES `+strings.Join(rows, ", ")+`) s ON s.column1 = c.priority AND s.column2 = c.v AND c.rn <= s.column3
WHERE c.rn <= `+strconv.Itoa(most), args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var cands []store.FairCandidate
	for rs.Next() {
		var c store.FairCandidate
		dest := []any{&c.ID, &c.Priority, &c.Value, &c.Rank}
		var attrs []byte
		if limited {
			dest = append(dest, &c.Kind, &attrs)
		}
		if err := rs.Scan(dest...); err != nil {
			return nil, err
		}
		if len(attrs) > 0 {
			if err := json.Unmarshal(attrs, &c.Attrs); err != nil {
				return nil, fmt.Errorf("task %s: attributes: %w", c.ID, err)
			}
		}
		cands = append(cands, c)
	}
	return cands, rs.Err()
}
