package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Fairness = (*Store)(nil)

// claimFair is Claim on a queue that may be fair, in tx (the one
// writer's, so fair claims take turns): pick by the values' passes within
// the limits with p.Limited (sqldialect's FairPlan) and claim the picked
// tasks. A queue no longer fair claims as usual (within its limits).
func (s *Store) claimFair(ctx context.Context, tx *sql.Tx, p store.ClaimParams) ([]*bt.Task, error) {
	ids, fair, err := s.procedures.FairPlan(ctx, runner{q: tx}, p)
	if err != nil {
		return nil, err
	}
	if !fair && p.Limited {
		return s.claimLimited(ctx, tx, p) // limits.go
	}
	if !fair {
		return s.claimIn(ctx, tx, p, p.Max, kindFilter(p.Kinds))
	}
	if len(ids) == 0 {
		return nil, nil
	}
	idJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	return s.claimIn(ctx, tx, p, len(ids), claimFilter{sql: " AND id IN (SELECT value FROM json_each(?))", args: []any{string(idJSON)}})
}
