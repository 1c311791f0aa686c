package pgstore

import (
	"context"

	"github.com/backstophq/backstop/store"
)

// Gauges implements store.GaugeReader (store/internal/sqldialect).
func (s *Store) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	return dialect.Gauges(ctx, s.runner())
}
