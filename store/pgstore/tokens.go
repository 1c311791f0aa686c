package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/store"
)

var (
	_ store.Tokens   = (*Store)(nil)
	_ store.APIStore = (*Store)(nil)
)

const tokenColumns = `id, name, role, hash, created_at, revoked_at, last_used_at`

func scanToken(row pgx.Row) (*store.Token, error) {
	var t store.Token
	if err := row.Scan(&t.ID, &t.Name, &t.Role, &t.Hash, &t.CreatedAt, &t.RevokedAt, &t.LastUsedAt); err != nil {
		return nil, err
	}
	t.CreatedAt = t.CreatedAt.UTC()
	for _, p := range []*time.Time{t.RevokedAt, t.LastUsedAt} {
		if p != nil {
			*p = p.UTC()
		}
	}
	return &t, nil
}

// CreateToken implements store.Tokens.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO backstop_tokens (id, name, role, hash, created_at) VALUES ($1, $2, $3, $4, $5)`,
		t.ID, t.Name, t.Role, t.Hash, t.CreatedAt)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return fmt.Errorf("%w: a live token named %q already exists", store.ErrConflict, t.Name)
	}
	if err != nil {
		return fmt.Errorf("pgstore: create token: %w", err)
	}
	return nil
}

// TokenByHash implements store.Tokens.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM backstop_tokens WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: token by hash: %w", err)
	}
	return t, nil
}

// ListTokens implements store.Tokens.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM backstop_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list tokens: %w", err)
	}
	defer rows.Close()
	out := []store.Token{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("pgstore: list tokens: %w", err)
		}
		out = append(out, *t)
	}
	return out, rows.Err()
}

// RevokeToken implements store.Tokens.
func (s *Store) RevokeToken(ctx context.Context, idOrName string, now time.Time) (*store.Token, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	t, err := scanToken(tx.QueryRow(ctx, `SELECT `+tokenColumns+` FROM backstop_tokens
		WHERE id = $1 OR (name = $1 AND revoked_at IS NULL) ORDER BY id = $1 DESC LIMIT 1 FOR UPDATE`, idOrName))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("token %q: %w", idOrName, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: revoke token: %w", err)
	}
	if t.RevokedAt != nil {
		return nil, fmt.Errorf("%w: token %q is already revoked", store.ErrConflict, idOrName)
	}
	if _, err := tx.Exec(ctx, `UPDATE backstop_tokens SET revoked_at = $1 WHERE id = $2`, now, t.ID); err != nil {
		return nil, fmt.Errorf("pgstore: revoke token: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: revoke token: %w", err)
	}
	n := now.UTC().Truncate(time.Microsecond)
	t.RevokedAt = &n
	return t, nil
}

// TouchToken implements store.Tokens.
func (s *Store) TouchToken(ctx context.Context, id string, now time.Time) error {
	if _, err := s.pool.Exec(ctx, `UPDATE backstop_tokens SET last_used_at = $1 WHERE id = $2`, now, id); err != nil {
		return fmt.Errorf("pgstore: touch token: %w", err)
	}
	return nil
}
