package pgstore

import (
	"context"

	"github.com/backstophq/backstop/store"
)

// CountByQueue implements store.APIStore (store/internal/sqldialect).
func (s *Store) CountByQueue(ctx context.Context) ([]store.QueueCounts, error) {
	return dialect.CountByQueue(ctx, s.runner())
}
