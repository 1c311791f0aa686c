package store

import (
	"context"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
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
	// CreateToken inserts t and appends ev (its audit event, TokenEvent;
	// none when ev.Type is empty) in the same transaction: an event the log
	// refuses leaves no token. A token with the same name that is not
	// revoked gives ErrConflict.
	CreateToken(ctx context.Context, t Token, ev bt.Event) error
	// TokenByHash returns the token, revoked or not, whose secret hashes
	// to hash; ErrNotFound if none.
	TokenByHash(ctx context.Context, hash []byte) (*Token, error)
	// ListTokens lists every token, oldest first.
	ListTokens(ctx context.Context) ([]Token, error)
	// RevokeToken revokes the token with this id (or, failing that, the
	// live token with this name): ErrNotFound if none, ErrConflict if it
	// is already revoked. audit (nil: no event) is given the revoked token
	// and its event is appended in the same transaction: an event the log
	// refuses leaves the token live.
	RevokeToken(ctx context.Context, idOrName string, now time.Time, audit func(Token) bt.Event) (*Token, error)
	// TouchToken records that the token was used at now.
	TouchToken(ctx context.Context, id string, now time.Time) error
}

// TokenEvent is the audit event of a token's creation or revocation (typ
// EventTokenCreated or EventTokenRevoked) at now: its target is the token's
// id, its body names the token and its role (never its secret), its actor
// and reason are the context's (WithActor, else DefaultActor; WithReason).
func TokenEvent(ctx context.Context, now time.Time, typ string, t Token) bt.Event {
	return AuditEvent(now, typ, t.ID, ActorFrom(ctx, DefaultActor), ReasonFrom(ctx),
		map[string]any{"name": t.Name, "role": t.Role})
}
