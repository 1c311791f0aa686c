package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/backstophq/backstop/redact"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// Role is what a token may do; each role includes the ones below it.
type Role int

const (
	// RoleNone marks routes anyone may call (health, the OpenAPI document).
	RoleNone Role = iota
	// RoleViewer reads; task payloads come back redacted.
	RoleViewer
	// RoleOperator also enqueues, cancels and runs the worker protocol, and
	// reads raw payloads (a remote worker needs them).
	RoleOperator
	// RoleAdmin may do everything (DLQ operations and token management, as
	// their endpoints land).
	RoleAdmin
)

var roleNames = map[Role]string{RoleNone: "none", RoleViewer: "viewer", RoleOperator: "operator", RoleAdmin: "admin"}

func (r Role) String() string { return roleNames[r] }

// ParseRole reads viewer, operator or admin.
func ParseRole(s string) (Role, error) {
	for r, n := range roleNames {
		if r != RoleNone && n == s {
			return r, nil
		}
	}
	return RoleNone, fmt.Errorf("%w: role %q: use viewer, operator or admin", backstop.ErrInvalid, s)
}

// SecretPrefix starts every token secret, so secret scanners can find leaked
// ones.
const SecretPrefix = "bst_"

// maxSecretLen bounds the Authorization header we bother hashing.
const maxSecretLen = 128

var tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,63}$`)

// HashSecret is how a token secret is stored and looked up.
func HashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CreateToken makes a token with a new random secret (32 bytes, base64url,
// prefixed "bst_") and stores only its hash. The secret is returned once and
// cannot be recovered.
func CreateToken(ctx context.Context, s store.Tokens, name string, role Role, now time.Time) (secret string, t store.Token, err error) {
	if !tokenNameRE.MatchString(name) {
		return "", t, fmt.Errorf("%w: token name %q must be 1-64 letters, digits, '_', '.', ':', '@' or '-'", backstop.ErrInvalid, name)
	}
	if role < RoleViewer || role > RoleAdmin {
		return "", t, fmt.Errorf("%w: unknown role", backstop.ErrInvalid)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", t, err
	}
	secret = SecretPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	id, err := uuid.NewV7()
	if err != nil {
		return "", t, err
	}
	t = store.Token{ID: id.String(), Name: name, Role: role.String(), Hash: HashSecret(secret),
		CreatedAt: now.UTC().Truncate(time.Microsecond)}
	if err := s.CreateToken(ctx, t); err != nil {
		return "", store.Token{}, err
	}
	return secret, t, nil
}

// principal is who is calling.
type principal struct {
	Name    string // token name, or "anonymous" (--dev)
	TokenID string
	Role    Role
	// How this request sees payloads (redaction.go): masked by mask, or
	// raw (an admin's ?raw=true) with each task shown recorded in audit.
	mask   *redact.Masker
	audit  *viewAudit
	worker bool // a claim: the payload goes to the worker as stored
}

type principalKey struct{}

func principalFrom(ctx context.Context) principal {
	p, _ := ctx.Value(principalKey{}).(principal)
	return p
}

var errUnauthenticated = errors.New("unauthenticated")

// authenticate resolves the bearer token. The lookup is by the SHA-256 of a
// 256-bit random secret (its timing says nothing about the secret); the
// stored hash is then compared in constant time.
func (s *Server) authenticate(r *http.Request) (principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if s.opts.AnonymousAdmin {
			return principal{Name: "anonymous", Role: RoleAdmin}, nil
		}
		return principal{}, fail(codeUnauthenticated, "send Authorization: Bearer <token>")
	}
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !strings.HasPrefix(secret, SecretPrefix) || len(secret) > maxSecretLen {
		return principal{}, fail(codeUnauthenticated, "the Authorization header must be Bearer bst_...")
	}
	sum := HashSecret(secret)
	now := s.now()
	t := s.tokenCache.get(sum, now)
	if t == nil {
		var err error
		t, err = s.tokens.TokenByHash(r.Context(), sum)
		if errors.Is(err, store.ErrNotFound) {
			return principal{}, fail(codeUnauthenticated, "unknown token")
		}
		if err != nil {
			return principal{}, err
		}
		s.tokenCache.put(sum, t, now)
	}
	if subtle.ConstantTimeCompare(sum, t.Hash) != 1 {
		return principal{}, fail(codeUnauthenticated, "unknown token")
	}
	if t.RevokedAt != nil {
		return principal{}, fail(codeUnauthenticated, "the token was revoked")
	}
	role, err := ParseRole(t.Role)
	if err != nil {
		return principal{}, fmt.Errorf("token %s has a bad role: %w", t.ID, err)
	}
	s.touch(r.Context(), t)
	return principal{Name: t.Name, TokenID: t.ID, Role: role}, nil
}

// touch records last_used_at at most once a minute per token, so a busy
// worker does not turn every request into a write.
func (s *Server) touch(ctx context.Context, t *store.Token) {
	now := s.now()
	if last, ok := s.touched.Load(t.ID); ok && now.Sub(last.(time.Time)) < time.Minute {
		return
	}
	if t.LastUsedAt != nil && now.Sub(*t.LastUsedAt) < time.Minute {
		s.touched.Store(t.ID, *t.LastUsedAt)
		return
	}
	s.touched.Store(t.ID, now)
	if err := s.tokens.TouchToken(ctx, t.ID, now); err != nil && ctx.Err() == nil {
		s.log.Warn("api: recording token use failed", "token", t.Name, "error", err)
	}
}

// limiters holds one rate limiter per token (anonymous callers share one).
type limiters struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	m     map[string]*rate.Limiter
}

func (l *limiters) allow(key string) bool {
	if l.limit <= 0 {
		return true
	}
	l.mu.Lock()
	lim := l.m[key]
	if lim == nil {
		lim = rate.NewLimiter(l.limit, l.burst)
		l.m[key] = lim
	}
	l.mu.Unlock()
	return lim.Allow()
}
