package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

var _ store.Secrets = (*Store)(nil)

// Secret implements store.Secrets: insert if absent, then read back (one
// writer: the read sees whichever insert came first).
func (s *Store) Secret(ctx context.Context, name string, candidate []byte, now time.Time) ([]byte, error) {
	if _, err := s.w.ExecContext(ctx, `INSERT INTO backstop_secrets (name, value, created_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO NOTHING`, name, candidate, us(now)); err != nil {
		return nil, fmt.Errorf("sqlite: secret %s: %w", name, err)
	}
	var v []byte
	if err := s.w.QueryRowContext(ctx, `SELECT value FROM backstop_secrets WHERE name = ?`, name).Scan(&v); err != nil {
		return nil, fmt.Errorf("sqlite: secret %s: %w", name, err)
	}
	return v, nil
}
