package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/console"
	"github.com/backstophq/backstop/store"
)

func sessionCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == api.SessionCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", api.SessionCookie, resp.Header["Set-Cookie"])
	return nil
}

// The session over plain HTTP: the cookie's attributes, the API accepting
// it with the same roles as the token, CSRF on every mutating request,
// sign-out and expiry.
func TestConsoleSession(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{sessionTTL: time.Hour})
		id := e.enqueue(t, map[string]any{"queue": "mail", "kind": "send", "payload": map[string]any{"n": 1}})

		// The page and its assets, with a policy that loads nothing from elsewhere.
		st, _, resp := e.call(t, "GET", "/", api.RoleNone, nil, nil)
		if st != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Fatalf("GET /: %d %v", st, resp.Header)
		}
		// Without a session: 401, and no anonymous way in.
		if st, _, _ := e.call(t, "GET", "/console/session", api.RoleNone, nil, nil); st != http.StatusUnauthorized {
			t.Fatalf("session without a cookie: %d", st)
		}
		if st, _, _ := e.call(t, "GET", "/v1/queues", api.RoleNone, nil, nil, &http.Cookie{Name: api.SessionCookie, Value: "forged"}); st != http.StatusUnauthorized {
			t.Fatalf("a forged cookie: %d", st)
		}
		// A bad token signs nobody in.
		if st, _, _ := e.call(t, "POST", "/console/session", api.RoleNone, map[string]string{"token": "bst_nope"}, nil); st != http.StatusUnauthorized {
			t.Fatalf("sign-in with an unknown token: %d", st)
		}

		st, se, resp := e.call(t, "POST", "/console/session", api.RoleNone, map[string]string{"token": e.secret[api.RoleOperator]}, nil)
		if st != http.StatusOK || se["role"] != "operator" || se["csrf"] == "" {
			t.Fatalf("sign-in: %d %v", st, se)
		}
		c := sessionCookie(t, resp)
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure {
			t.Fatalf("cookie attributes: %+v (want HttpOnly, SameSite=Strict, not Secure over plain HTTP)", c)
		}
		if strings.Contains(resp.Header.Get("Set-Cookie"), e.secret[api.RoleOperator]) {
			t.Fatal("the cookie carries the token secret")
		}
		csrf := se["csrf"].(string)
		hdr := map[string]string{api.CSRFHeader: csrf}

		// Reads need no CSRF token.
		if st, _, _ := e.call(t, "GET", "/v1/tasks/"+id, api.RoleNone, nil, nil, c); st != http.StatusOK {
			t.Fatalf("read with the session: %d", st)
		}
		// A mutating request without (or with a wrong) CSRF token: 403, nothing done.
		for _, h := range []map[string]string{nil, {api.CSRFHeader: "wrong"}} {
			st, p, _ := e.call(t, "POST", "/v1/queues/mail/pause", api.RoleNone, nil, h, c)
			if st != http.StatusForbidden || p["code"] != "forbidden" {
				t.Fatalf("pause without the CSRF token (%v): %d %v", h, st, p)
			}
		}
		if qs, _ := e.lib.Queues(t.Context()); len(qs) != 1 || qs[0].Paused {
			t.Fatalf("the queue was paused by a request without CSRF: %+v", qs)
		}
		// With it: the operator may pause, not replay (the token's role).
		if st, p, _ := e.call(t, "POST", "/v1/queues/mail/pause", api.RoleNone, nil, hdr, c); st != http.StatusOK || p["paused_by"] != "console-operator" {
			t.Fatalf("pause with the session: %d %v", st, p)
		}
		if st, _, _ := e.call(t, "POST", "/v1/dlq/"+id+"/replay", api.RoleNone, map[string]any{}, hdr, c); st != http.StatusForbidden {
			t.Fatalf("an operator's session replayed: %d", st)
		}

		// Sign-out needs the CSRF token too, then the session is gone.
		if st, _, _ := e.call(t, "POST", "/console/session/signout", api.RoleNone, nil, nil, c); st != http.StatusForbidden {
			t.Fatalf("sign-out without CSRF: %d", st)
		}
		if st, _, _ := e.call(t, "POST", "/console/session/signout", api.RoleNone, nil, hdr, c); st != http.StatusNoContent {
			t.Fatalf("sign-out: %d", st)
		}
		if st, _, _ := e.call(t, "GET", "/v1/queues", api.RoleNone, nil, nil, c); st != http.StatusUnauthorized {
			t.Fatalf("after sign-out: %d", st)
		}

		// Expiry: a session ends after its TTL.
		_, se, resp = e.call(t, "POST", "/console/session", api.RoleNone, map[string]string{"token": e.secret[api.RoleViewer]}, nil)
		c = sessionCookie(t, resp)
		if st, _, _ := e.call(t, "GET", "/v1/queues", api.RoleNone, nil, nil, c); st != http.StatusOK {
			t.Fatalf("viewer session: %d", st)
		}
		e.clock.Advance(time.Hour + time.Second)
		if st, _, _ := e.call(t, "GET", "/v1/queues", api.RoleNone, nil, nil, c); st != http.StatusUnauthorized {
			t.Fatalf("an expired session: %d", st)
		}
		if st, _, _ := e.call(t, "GET", "/console/session", api.RoleNone, nil, nil, c); st != http.StatusUnauthorized {
			t.Fatalf("an expired session's info: %d", st)
		}
		_ = se
	})
}

// Dev mode (loopback --dev): the console needs no sign-in, as the API.
func TestConsoleDevSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdbSQLite(t), envOpts{dev: true})
	st, se, _ := e.call(t, "GET", "/console/session", api.RoleNone, nil, nil)
	if st != http.StatusOK || se["dev"] != true || se["role"] != "admin" {
		t.Fatalf("dev session: %d %v", st, se)
	}
}

// Revoking the token ends its console sessions (within the token cache's
// second); over TLS the cookie is Secure.
func TestConsoleSessionRevokedAndTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdbSQLite(t), envOpts{})
	_, _, resp := e.call(t, "POST", "/console/session", api.RoleNone, map[string]string{"token": e.secret[api.RoleAdmin]}, nil)
	c := sessionCookie(t, resp)
	if st, _, _ := e.call(t, "GET", "/v1/queues", api.RoleNone, nil, nil, c); st != http.StatusOK {
		t.Fatalf("session: %d", st)
	}
	if _, err := e.store.(store.Tokens).RevokeToken(context.Background(), "console-admin", e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(api.TokenCacheTTL + time.Millisecond)
	if st, p, _ := e.call(t, "GET", "/v1/queues", api.RoleNone, nil, nil, c); st != http.StatusUnauthorized {
		t.Fatalf("a revoked token's session: %d %v", st, p)
	}

	ts := httptest.NewTLSServer(console.Handler(e.srv))
	t.Cleanup(ts.Close)
	body := strings.NewReader(`{"token":"` + e.secret[api.RoleViewer] + `"}`)
	req, _ := http.NewRequest("POST", ts.URL+"/console/session", body)
	req.Header.Set("Content-Type", "application/json")
	r, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if c := sessionCookie(t, r); !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie over TLS: %+v", c)
	}
}
