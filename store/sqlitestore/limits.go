package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Limits = (*Store)(nil)

// sqlLimitCandidates: the limited claim's candidates in claim order, the
// claimable tasks outside the full budgets (a JSON array of [kind, per,
// value]: the limit's kind, ” for any; its per attribute, ” for none;
// the value). %s: the kind filter.
const sqlLimitCandidates = `SELECT id, kind, coalesce(attributes, '{}') FROM backstop_tasks t
WHERE state = 'pending' AND queue = ? AND run_at <= ? AND (deadline IS NULL OR deadline > ?)%s
	AND NOT EXISTS (SELECT 1 FROM backstop_queues WHERE name = ?)
	AND NOT EXISTS (SELECT 1 FROM json_each(?) f
		WHERE (json_extract(f.value, '$[0]') = '' OR json_extract(f.value, '$[0]') = t.kind)
		AND (json_extract(f.value, '$[1]') = ''
			OR coalesce(json_extract(t.attributes, '$."' || json_extract(f.value, '$[1]') || '"'), '') = json_extract(f.value, '$[2]')))
ORDER BY priority DESC, run_at, id LIMIT ?`

// claimLimited is Claim on a queue that may have limits, in tx (the one
// writer's, so limited claims take turns): count the queue's limits'
// budgets, read the next claimable tasks outside the full budgets, admit
// those the budgets leave room for, and claim them. A queue without
// limits (removed since the engine looked) claims as usual.
func (s *Store) claimLimited(ctx context.Context, tx *sql.Tx, p store.ClaimParams) ([]*bt.Task, error) {
	limits, bs, err := s.procedures.ClaimLimits(ctx, runner{q: tx}, p.Queue, p.Now)
	if err != nil {
		return nil, err
	}
	kinds := kindFilter(p.Kinds)
	if len(limits) == 0 {
		return s.claimIn(ctx, tx, p, p.Max, kinds)
	}
	full := [][3]string{}
	for _, b := range bs.Full(limits) {
		for _, l := range limits {
			if l.Name == b.Limit {
				full = append(full, [3]string{l.Kind, l.Per, b.Value})
			}
		}
	}
	fullJSON, err := json.Marshal(full)
	if err != nil {
		return nil, err
	}
	now := us(p.Now)
	args := append([]any{p.Queue, now, now}, kinds.args...)
	args = append(args, p.Queue, string(fullJSON), p.Max)
	rows, err := tx.QueryContext(ctx, fmtKinds(sqlLimitCandidates, kinds.sql), args...)
	if err != nil {
		return nil, err
	}
	var cands []store.LimitCandidate
	for rows.Next() {
		var (
			c     store.LimitCandidate
			attrs string
		)
		if err := rows.Scan(&c.ID, &c.Kind, &attrs); err != nil {
			rows.Close()
			return nil, err
		}
		if err := json.Unmarshal([]byte(attrs), &c.Attrs); err != nil {
			rows.Close()
			return nil, err
		}
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	ids := store.AdmitWithinLimits(p.Queue, limits, bs, cands)
	if len(ids) == 0 {
		return nil, nil
	}
	if err := s.procedures.TakeTokens(ctx, runner{q: tx}, limits, bs); err != nil {
		return nil, err
	}
	idJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	return s.claimIn(ctx, tx, p, len(ids), claimFilter{sql: " AND id IN (SELECT value FROM json_each(?))", args: []any{string(idJSON)}})
}

// errLimitOverrun: an optimistic claim took a task whose budget it put
// over its limit; its transaction is rolled back.
var errLimitOverrun = errors.New("a limit's budget overrun")

// mayClaimOptimistically: no optimistic claim of the queue overran a
// limit in the last second.
func (s *Store) mayClaimOptimistically(p store.ClaimParams) bool {
	t, ok := s.limitBinding.Load(p.Queue)
	return !ok || p.Now.Sub(t.(time.Time)) >= time.Second || p.Now.Before(t.(time.Time))
}

// claimOptimistic claims in tx as a queue without limits would, then counts
// the budgets (the one writer: nothing claims in between), which include
// its own claims, and takes a token of each rate budget per claimed task:
// errLimitOverrun when a claimed task's budget is over its limit (Claim
// then rolls back and claims within the limits). A concurrency limit that
// does not bind costs one count; a rate limit, one read of its recently
// used buckets and one write per budget it takes from.
func (s *Store) claimOptimistic(ctx context.Context, tx *sql.Tx, p store.ClaimParams) ([]*bt.Task, error) {
	tasks, err := s.claimIn(ctx, tx, p, p.Max, kindFilter(p.Kinds))
	if err != nil || len(tasks) == 0 {
		return tasks, err
	}
	limits, bs, err := s.procedures.ClaimLimits(ctx, runner{q: tx}, p.Queue, p.Now)
	if err != nil {
		return nil, err
	}
	if bs != nil && bs.Overrun(p.Queue, limits, tasks) {
		return nil, errLimitOverrun
	}
	return tasks, s.procedures.TakeTokens(ctx, runner{q: tx}, limits, bs)
}

// fmtKinds puts the kind filter's SQL in the statement's %s.
func fmtKinds(q, kinds string) string { return strings.Replace(q, "%s", kinds, 1) }
