package sqlitestore

import (
	"context"
	"time"

	"github.com/backstophq/backstop/store"
)

var (
	_ store.Tokens   = (*Store)(nil)
	_ store.APIStore = (*Store)(nil)
)

// CreateToken implements store.Tokens (store/internal/sqldialect).
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	return dialect.CreateToken(ctx, s.writer(), t)
}

// TokenByHash implements store.Tokens.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	return dialect.TokenByHash(ctx, s.reader(), hash)
}

// ListTokens implements store.Tokens.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	return dialect.ListTokens(ctx, s.reader())
}

// RevokeToken implements store.Tokens.
func (s *Store) RevokeToken(ctx context.Context, idOrName string, now time.Time) (*store.Token, error) {
	return dialect.RevokeToken(ctx, s.writer(), idOrName, now)
}

// TouchToken implements store.Tokens.
func (s *Store) TouchToken(ctx context.Context, id string, now time.Time) error {
	return dialect.TouchToken(ctx, s.writer(), id, now)
}
