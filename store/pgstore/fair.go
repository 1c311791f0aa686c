package pgstore

import (
	"context"
	"fmt"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Fairness = (*Store)(nil)

// claimFair is Claim on a queue that may be fair: under the lock on its
// fairness row (and its limits' with p.Limited), pick by the values'
// passes within the limits (sqldialect's FairPlan) and claim the picked
// tasks. A queue no longer fair claims as usual.
func (s *Store) claimFair(ctx context.Context, p store.ClaimParams) ([]*bt.Task, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ids, fair, err := s.procedures.FairPlan(ctx, runner{q: tx}, p)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim %s: fairness: %w", p.Queue, err)
	}
	if !fair && p.Limited {
		_ = tx.Rollback(ctx)
		return s.claimLimited(ctx, p) // limits.go
	}
	var (
		tasks []*bt.Task
		note  pickNote // the plain pick's only: fair picks are not in claim order
	)
	switch {
	case !fair:
		tasks, note, err = s.pickClaim(ctx, tx, p)
	case len(ids) > 0:
		tasks, err = s.probedPick(ctx, tx, nil, "ids", s.hot(sqlClaimIDs), p.Queue, p.Now, len(ids), p.WorkerID, p.Now.Add(p.Lease), textArray(ids))
		if err == nil && len(tasks) < len(ids) && !p.Limited {
			// Picked tasks that a claim without the fairness lock (a
			// one-value claim, a process that does not know the queue is
			// fair yet) holds are skipped; the plain claim fills the batch,
			// so a claim does not come back short while tasks wait.
			var more []*bt.Task
			rest := p
			rest.Max = len(ids) - len(tasks)
			more, note, err = s.pickClaim(ctx, tx, rest)
			tasks = append(tasks, more...)
		}
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
