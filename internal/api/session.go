package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Web console sessions (internal/console; docs/console.md). Signing in
// posts a token secret once; the server answers a session cookie
// (SessionCookie: HttpOnly, SameSite=Strict, Secure over TLS) and a CSRF
// token. The session names the token by the hash of its secret, never the
// secret, and every request it authenticates resolves that token again
// (authenticate, principalByHash): the same roles apply, and revoking the
// token ends its sessions within TokenCacheTTL. Every request other than
// GET and HEAD made with the cookie must carry the CSRF token in
// CSRFHeader, or it is refused with 403 before the handler runs.
//
// Sessions live in the server's memory: a restart signs everyone out, and
// several servers behind one address need sticky routing.

// SessionCookie is the console session cookie's name.
const SessionCookie = "backstop_session"

// CSRFHeader carries a console session's CSRF token on mutating requests.
const CSRFHeader = "X-Backstop-CSRF"

// DefaultSessionTTL is how long a console session lasts after sign-in.
const DefaultSessionTTL = 12 * time.Hour

// maxSessions bounds the session table; beyond it, expired sessions are
// dropped, then the oldest.
const maxSessions = 10000

// Session is a signed-in console session, as the console's session
// endpoint answers it (the ID goes only into the cookie).
type Session struct {
	ID      string    `json:"-"`
	CSRF    string    `json:"csrf"`
	Name    string    `json:"name"`
	Role    string    `json:"role"`
	Expires time.Time `json:"expires"`
	// Dev: no session, the server lets anonymous requests in as admin.
	Dev bool `json:"dev,omitempty"`
}

type session struct {
	tokenHash []byte
	csrf      string
	name      string
	expires   time.Time
}

type sessions struct {
	mu sync.Mutex
	m  map[string]*session // key: SHA-256 of the session id
}

var errNoSession = &apiError{code: codeUnauthenticated, detail: "the console session is unknown or expired: sign in again"}

func randomID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func sessionKey(id string) string {
	h := sha256.Sum256([]byte(id))
	return string(h[:])
}

func (ss *sessions) get(id string, now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	se := ss.m[sessionKey(id)]
	if se == nil {
		return nil
	}
	if !now.Before(se.expires) {
		delete(ss.m, sessionKey(id))
		return nil
	}
	return se
}

func (ss *sessions) put(id string, se *session, now time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[string]*session{}
	}
	if len(ss.m) >= maxSessions {
		var oldestKey string
		var oldest time.Time
		for k, v := range ss.m {
			if !now.Before(v.expires) {
				delete(ss.m, k)
			} else if oldestKey == "" || v.expires.Before(oldest) {
				oldestKey, oldest = k, v.expires
			}
		}
		if len(ss.m) >= maxSessions {
			delete(ss.m, oldestKey)
		}
	}
	ss.m[sessionKey(id)] = se
}

func (ss *sessions) remove(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, sessionKey(id))
}

// safeMethod: requests that change nothing need no CSRF token.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// check resolves a session cookie to its token's hash, refusing a mutating
// request whose CSRF header does not match the session's.
func (ss *sessions) check(id string, r *http.Request, now time.Time) ([]byte, error) {
	se := ss.get(id, now)
	if se == nil {
		return nil, errNoSession
	}
	if !safeMethod(r.Method) {
		got := r.Header.Get(CSRFHeader)
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(se.csrf)) != 1 {
			return nil, fail(codeForbidden, "a console request that changes something must carry the session's CSRF token in "+CSRFHeader)
		}
	}
	return se.tokenHash, nil
}

// SignIn checks a token secret and opens a console session for it.
func (s *Server) SignIn(ctx context.Context, secret string) (Session, error) {
	secret = strings.TrimSpace(secret)
	if !strings.HasPrefix(secret, SecretPrefix) || len(secret) > maxSecretLen {
		return Session{}, fail(codeUnauthenticated, "that is not a Backstop token (bst_...)")
	}
	sum := HashSecret(secret)
	p, err := s.principalByHash(ctx, sum)
	if err != nil {
		return Session{}, err
	}
	id, err := randomID()
	if err != nil {
		return Session{}, err
	}
	csrf, err := randomID()
	if err != nil {
		return Session{}, err
	}
	now := s.now()
	exp := now.Add(s.opts.SessionTTL)
	s.sessions.put(id, &session{tokenHash: sum, csrf: csrf, name: p.Name, expires: exp}, now)
	s.log.Info("console sign-in", "actor", p.Name, "role", p.Role.String())
	return Session{ID: id, CSRF: csrf, Name: p.Name, Role: p.Role.String(), Expires: exp}, nil
}

// CurrentSession answers the request's console session (its CSRF token,
// its token's name and current role), the anonymous admin under --dev, or
// 401.
func (s *Server) CurrentSession(r *http.Request) (Session, error) {
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		if se := s.sessions.get(c.Value, s.now()); se != nil {
			p, err := s.principalByHash(r.Context(), se.tokenHash)
			if err != nil {
				return Session{}, err
			}
			return Session{CSRF: se.csrf, Name: p.Name, Role: p.Role.String(), Expires: se.expires}, nil
		}
	}
	if s.opts.AnonymousAdmin {
		return Session{Name: "anonymous", Role: RoleAdmin.String(), Dev: true}, nil
	}
	return Session{}, errNoSession
}

// SignOut ends the request's console session; like every mutating console
// request it needs the CSRF token.
func (s *Server) SignOut(r *http.Request) error {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return nil
	}
	if _, err := s.sessions.check(c.Value, r, s.now()); err != nil {
		if err == errNoSession {
			return nil
		}
		return err
	}
	s.sessions.remove(c.Value)
	return nil
}

// WriteProblem answers err as the API would (application/problem+json).
func (s *Server) WriteProblem(w http.ResponseWriter, r *http.Request, err error) {
	s.writeProblem(w, r, err)
}
