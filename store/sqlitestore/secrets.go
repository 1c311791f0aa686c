package sqlitestore

import (
	"context"
	"time"

	"github.com/backstophq/backstop/store"
)

var _ store.Secrets = (*Store)(nil)

// Secret implements store.Secrets (store/internal/sqldialect).
func (s *Store) Secret(ctx context.Context, name string, candidate []byte, now time.Time) ([]byte, error) {
	return dialect.Secret(ctx, s.writer(), name, candidate, now)
}
