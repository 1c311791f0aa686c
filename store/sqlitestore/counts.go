package sqlitestore

import (
	"context"

	"github.com/backstophq/backstop/store"
)

var _ store.CountKeeper = (*Store)(nil)

// FoldCounts implements store.CountKeeper: CountByQueue counts the rows on
// each read (one grouped scan), so nothing is kept and nothing is folded.
func (s *Store) FoldCounts(context.Context) (int, error) { return 0, nil }

// ReconcileCounts implements store.CountKeeper: counts read from the rows
// cannot drift.
func (s *Store) ReconcileCounts(context.Context) (store.CountDrift, error) {
	return store.CountDrift{}, nil
}
