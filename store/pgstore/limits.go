package pgstore

import (
	"context"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Limits = (*Store)(nil)

// claimLimited is Claim on a queue that may have limits. Limited claims
// of a queue take turns under a lock on its limit rows, and each counts
// the running rows its budgets hold while it has the lock, so each one
// sees the claims committed before it.
//
// It first claims optimistically: the plain claim, then the lock, then
// the budgets (running counts, which include its own claims; token
// buckets, of which it takes one per claimed task and stores them); when
// no budget is over its limit it commits (the lock is held only for the counts and the commit:
// a limit that does not bind costs little). When one is over, it rolls
// back and claims within the limits (claimWithin), and for the next
// second claims of the queue go there directly.
func (s *Store) claimLimited(ctx context.Context, p store.ClaimParams) ([]*bt.Task, error) {
	if t, ok := s.limitBinding.Load(p.Queue); !ok || p.Now.Sub(t.(time.Time)) >= time.Second || p.Now.Before(t.(time.Time)) {
		tasks, ok, err := s.claimOptimistic(ctx, p)
		if err != nil || ok {
			return tasks, err
		}
		s.limitBinding.Store(p.Queue, p.Now)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	limits, bs, err := s.procedures.ClaimLimits(ctx, runner{q: tx}, p.Queue, p.Now)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim %s: limits: %w", p.Queue, err)
	}
	var (
		tasks []*bt.Task
		note  pickNote
	)
	if len(limits) == 0 {
		tasks, note, err = s.pickClaim(ctx, tx, p)
	} else {
		tasks, err = s.claimWithin(ctx, tx, p, limits, bs)
	}
	if err == nil {
		err = s.procedures.TakeTokens(ctx, runner{q: tx}, limits, bs)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
	}
	note.record()
	sortClaimed(tasks)
	return tasks, nil
}

// claimOptimistic claims as a queue without limits would, then takes the
// limits' lock and counts; ok is false (and nothing is claimed) when a
// budget one of the claimed tasks counts against is over its limit.
func (s *Store) claimOptimistic(ctx context.Context, p store.ClaimParams) (tasks []*bt.Task, ok bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	tasks, note, err := s.pickClaim(ctx, tx, p)
	if err != nil || len(tasks) == 0 {
		if err != nil {
			err = fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
		}
		return nil, err == nil, err
	}
	limits, bs, err := s.procedures.ClaimLimits(ctx, runner{q: tx}, p.Queue, p.Now)
	if err != nil {
		return nil, false, fmt.Errorf("pgstore: claim %s: limits: %w", p.Queue, err)
	}
	if bs != nil && bs.Overrun(p.Queue, limits, tasks) {
		return nil, false, nil
	}
	if err := s.procedures.TakeTokens(ctx, runner{q: tx}, limits, bs); err != nil {
		return nil, false, fmt.Errorf("pgstore: claim %s: limits: %w", p.Queue, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, false, fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
	}
	note.record()
	sortClaimed(tasks)
	return tasks, true, nil
}

// claimWithin admits and claims, in tx, the candidates the budgets leave
// room for.
func (s *Store) claimWithin(ctx context.Context, tx querier, p store.ClaimParams, limits []store.Limit, bs *store.Budgets) ([]*bt.Task, error) {
	var fk, fp, fv textArray
	for _, b := range bs.Full(limits) {
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
	ids := store.AdmitWithinLimits(p.Queue, limits, bs, cands)
	if len(ids) == 0 {
		return nil, nil
	}
	return s.probedPick(ctx, tx, nil, "ids", s.hot(sqlClaimIDs), p.Queue, p.Now, len(ids), p.WorkerID, p.Now.Add(p.Lease), textArray(ids))
}
