package store

import (
	"context"
	"time"
)

// Token is an API bearer token as stored: only the SHA-256 hash of its
// secret is kept, so a stolen database does not hand out access.
type Token struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	Hash       []byte     `json:"-"`
	CreatedAt  time.Time  `json:"created_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// Tokens stores API tokens (internal/api decides what they may do).
type Tokens interface {
	// CreateToken inserts t; a token with the same name that is not
	// revoked gives ErrConflict.
	CreateToken(ctx context.Context, t Token) error
	// TokenByHash returns the token, revoked or not, whose secret hashes
	// to hash; ErrNotFound if none.
	TokenByHash(ctx context.Context, hash []byte) (*Token, error)
	// ListTokens lists every token, oldest first.
	ListTokens(ctx context.Context) ([]Token, error)
	// RevokeToken revokes the token with this id (or, failing that, the
	// live token with this name): ErrNotFound if none, ErrConflict if it
	// is already revoked.
	RevokeToken(ctx context.Context, idOrName string, now time.Time) (*Token, error)
	// TouchToken records that the token was used at now.
	TouchToken(ctx context.Context, id string, now time.Time) error
}
