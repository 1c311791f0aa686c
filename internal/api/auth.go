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
	"strconv"
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
// prefixed "bst_") and stores only its hash, with its token.created audit
// event (actor and reason from ctx: store.WithActor, store.WithReason) in
// the same transaction. The secret is returned once and cannot be
// recovered.
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
	if err := s.CreateToken(ctx, t, store.TokenEvent(ctx, t.CreatedAt, store.EventTokenCreated, t)); err != nil {
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

// authenticate resolves who is calling: a bearer token, else the web
// console's session cookie (session.go: the session names a token, and
// every mutating request must carry the session's CSRF token in
// CSRFHeader), else, under --dev, the anonymous admin. The one place the
// API and the console authenticate, so both follow the same tokens and
// roles.
func (s *Server) authenticate(r *http.Request) (principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
			sum, err := s.sessions.check(c.Value, r, s.now())
			if err == nil {
				return s.principalByHash(r.Context(), sum)
			}
			if !s.opts.AnonymousAdmin || !errors.Is(err, errNoSession) {
				return principal{}, err
			}
		}
		if s.opts.AnonymousAdmin {
			return principal{Name: "anonymous", Role: RoleAdmin}, nil
		}
		return principal{}, fail(codeUnauthenticated, "send Authorization: Bearer <token>")
	}
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !strings.HasPrefix(secret, SecretPrefix) || len(secret) > maxSecretLen {
		return principal{}, fail(codeUnauthenticated, "the Authorization header must be Bearer bst_...")
	}
	return s.principalByHash(r.Context(), HashSecret(secret))
}

// principalByHash resolves a token by the SHA-256 of its secret. The lookup
// is by the hash of a 256-bit random secret (its timing says nothing about
// the secret); the stored hash is then compared in constant time.
func (s *Server) principalByHash(ctx context.Context, sum []byte) (principal, error) {
	now := s.now()
	t := s.tokenCache.get(sum, now)
	if t == nil {
		var err error
		t, err = s.tokens.TokenByHash(ctx, sum)
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
	s.touch(ctx, t)
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

// limiters holds the rate limiters: one per token and budget (anonymous
// callers share one per budget).
type limiters struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	m     map[string]*rate.Limiter
}

// rateBudget is which of a token's budgets a route spends.
type rateBudget int

const (
	// budgetAPI: producers, operators and readers (every route but the
	// worker protocol's).
	budgetAPI rateBudget = iota
	// budgetWorker: the worker protocol's claims and log appends, a budget
	// of their own so that producers sharing a token cannot starve the
	// workers (nor the workers the producers).
	budgetWorker
	// budgetNone: heartbeats and settlements (complete, fail, release, the
	// batch complete) are not limited. Each names a lease a claim handed
	// out (claims are limited), and throttling them manufactures
	// failures: a refused heartbeat or report lets the lease expire and
	// charges the attempt of a program that may have succeeded.
	budgetNone
)

// budgetOf is the budget of a route (its ServeMux pattern).
func budgetOf(method, path string) rateBudget {
	switch method + " " + path {
	case "POST /v1/claim", "POST /v1/tasks/{id}/logs", "POST /v1/workers":
		return budgetWorker
	case "POST /v1/tasks/{id}/heartbeat", "POST /v1/tasks/{id}/progress", "POST /v1/tasks/{id}/complete",
		"POST /v1/tasks/{id}/fail", "POST /v1/tasks/{id}/release", "POST /v1/tasks/complete",
		// A worker's registry heartbeat and stop keep `workers list` true.
		"POST /v1/workers/{id}/heartbeat", "POST /v1/workers/{id}/stop",
		// A draining worker's claim stop: refused, the claim's tasks
		// would be cut off with its answer (claimstop.go).
		"POST /v1/claims/{claim_id}/stop":
		return budgetNone
	}
	return budgetAPI
}

// allow spends one request of key's budget b. When it refuses, wait is how
// long until the budget has a request again (for Retry-After).
func (l *limiters) allow(key string, b rateBudget) (ok bool, wait time.Duration) {
	if l.limit <= 0 || b == budgetNone {
		return true, 0
	}
	if b == budgetWorker {
		key = "worker\x00" + key
	}
	l.mu.Lock()
	lim := l.m[key]
	if lim == nil {
		lim = rate.NewLimiter(l.limit, l.burst)
		l.m[key] = lim
	}
	l.mu.Unlock()
	now := time.Now()
	if lim.AllowN(now, 1) {
		return true, 0
	}
	r := lim.ReserveN(now, 1)
	wait = r.DelayFrom(now)
	r.CancelAt(now)
	return false, wait
}

// retryAfter is a Retry-After header value: whole seconds, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10)
}
