package pgstore

import (
	"context"
	"fmt"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Limits = (*Store)(nil)

// claimLimited is Claim on a queue that may have limits, in one
// transaction: lock the queue's limits (limited claims of the queue take
// turns, and each counts the running rows the ones before it committed),
// count their budgets' running tasks, lock the next claimable tasks
// outside the full budgets, admit those the budgets leave room for, and
// claim them. A queue without limits (removed since the engine looked)
// claims as usual.
func (s *Store) claimLimited(ctx context.Context, p store.ClaimParams) ([]*bt.Task, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	limits, running, err := s.procedures.ClaimLimits(ctx, runner{q: tx}, p.Queue)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim %s: limits: %w", p.Queue, err)
	}
	var tasks []*bt.Task
	if len(limits) == 0 {
		q, args := sqlClaim, []any{p.Queue, p.Now, p.Max, p.WorkerID, p.Now.Add(p.Lease)}
		if len(p.Kinds) > 0 {
			q, args = sqlClaimKinds, append(args, textArray(p.Kinds))
		}
		tasks, err = queryTasksOn(ctx, tx, q, args...)
	} else {
		tasks, err = claimWithin(ctx, tx, p, limits, running)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
	}
	sortClaimed(tasks)
	return tasks, nil
}

// claimWithin admits and claims, in tx, the candidates the budgets leave
// room for.
func claimWithin(ctx context.Context, tx querier, p store.ClaimParams, limits []store.Limit, running map[store.Budget]int) ([]*bt.Task, error) {
	var fk, fp, fv textArray
	for _, b := range store.FullBudgets(limits, running) {
		for _, l := range limits {
			if l.Name == b.Limit {
				fk, fp, fv = append(fk, l.Kind), append(fp, l.Per), append(fv, b.Value)
			}
		}
	}
	rs, err := tx.Query(ctx, sqlLimitCandidates, p.Queue, p.Now, p.Max, textArray(append([]string{}, p.Kinds...)),
		append(textArray{}, fk...), append(textArray{}, fp...), append(textArray{}, fv...))
	if err != nil {
		return nil, err
	}
	var cands []store.LimitCandidate
	for rs.Next() {
		var c store.LimitCandidate
		if err := rs.Scan(&c.ID, &c.Kind, &c.Attrs); err != nil {
			rs.Close()
			return nil, err
		}
		cands = append(cands, c)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, err
	}
	ids := store.AdmitWithinLimits(p.Queue, limits, running, cands)
	if len(ids) == 0 {
		return nil, nil
	}
	return queryTasksOn(ctx, tx, sqlClaimIDs, p.Queue, p.Now, len(ids), p.WorkerID, p.Now.Add(p.Lease), textArray(ids))
}
