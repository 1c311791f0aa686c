package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

var (
	_ store.Tokens   = (*Store)(nil)
	_ store.APIStore = (*Store)(nil)
)

const tokenColumns = `id, name, role, hash, created_at, revoked_at, last_used_at`

func scanToken(sc interface{ Scan(...any) error }) (*store.Token, error) {
	var t store.Token
	var created int64
	var revoked, used sql.NullInt64
	if err := sc.Scan(&t.ID, &t.Name, &t.Role, &t.Hash, &created, &revoked, &used); err != nil {
		return nil, err
	}
	t.CreatedAt, t.RevokedAt, t.LastUsedAt = fromUS(created), fromNullUS(revoked), fromNullUS(used)
	return &t, nil
}

// CreateToken implements store.Tokens.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO backstop_tokens (id, name, role, hash, created_at) VALUES (?, ?, ?, ?, ?)`,
		t.ID, t.Name, t.Role, t.Hash, us(t.CreatedAt))
	if isUnique(err) {
		return fmt.Errorf("%w: a live token named %q already exists", store.ErrConflict, t.Name)
	}
	if err != nil {
		return fmt.Errorf("sqlite: create token: %w", err)
	}
	return nil
}

// TokenByHash implements store.Tokens.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	t, err := scanToken(s.r.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM backstop_tokens WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: token by hash: %w", err)
	}
	return t, nil
}

// ListTokens implements store.Tokens.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+tokenColumns+` FROM backstop_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list tokens: %w", err)
	}
	defer rows.Close()
	out := []store.Token{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list tokens: %w", err)
		}
		out = append(out, *t)
	}
	return out, rows.Err()
}

// RevokeToken implements store.Tokens.
func (s *Store) RevokeToken(ctx context.Context, idOrName string, now time.Time) (*store.Token, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck
	t, err := scanToken(tx.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM backstop_tokens
		WHERE id = ? OR (name = ? AND revoked_at IS NULL) ORDER BY id = ? DESC LIMIT 1`, idOrName, idOrName, idOrName))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("token %q: %w", idOrName, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: revoke token: %w", err)
	}
	if t.RevokedAt != nil {
		return nil, fmt.Errorf("%w: token %q is already revoked", store.ErrConflict, idOrName)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE backstop_tokens SET revoked_at = ? WHERE id = ?`, us(now), t.ID); err != nil {
		return nil, fmt.Errorf("sqlite: revoke token: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: revoke token: %w", err)
	}
	n := now.UTC().Truncate(time.Microsecond)
	t.RevokedAt = &n
	return t, nil
}

// TouchToken implements store.Tokens.
func (s *Store) TouchToken(ctx context.Context, id string, now time.Time) error {
	if _, err := s.w.ExecContext(ctx, `UPDATE backstop_tokens SET last_used_at = ? WHERE id = ?`, us(now), id); err != nil {
		return fmt.Errorf("sqlite: touch token: %w", err)
	}
	return nil
}
