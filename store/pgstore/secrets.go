package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

var _ store.Secrets = (*Store)(nil)

// Secret implements store.Secrets in two statements: the insert waits for
// a concurrent insert of the same name to commit or roll back, and the
// read (a new snapshot) then sees the value that won.
func (s *Store) Secret(ctx context.Context, name string, candidate []byte, now time.Time) ([]byte, error) {
	if _, err := s.pool.Exec(ctx, `INSERT INTO backstop_secrets (name, value, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO NOTHING`, name, candidate, now); err != nil {
		return nil, fmt.Errorf("pgstore: secret %s: %w", name, err)
	}
	var v []byte
	if err := s.pool.QueryRow(ctx, `SELECT value FROM backstop_secrets WHERE name = $1`, name).Scan(&v); err != nil {
		return nil, fmt.Errorf("pgstore: secret %s: %w", name, err)
	}
	return v, nil
}
