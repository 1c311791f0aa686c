package console_test

import (
	"context"
	"encoding/json"
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
	if _, err := e.store.(store.Tokens).RevokeToken(context.Background(), "console-admin", e.clock.Now(), nil); err != nil {
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

// A signed-in console session (cookie and CSRF token) is no way in for a
// page on another site either: its writes are 403 cross_origin, a write
// that is not JSON is 415, a sign-in from another origin is 403, and a
// rebound host name gets 421 for the page itself; the console's own
// same-origin writes go through.
func TestConsoleSessionRefusesOtherOrigins(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{sessionTTL: time.Hour})
		foreign := map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
		if st, out, _ := e.call(t, "POST", "/console/session", api.RoleNone, map[string]string{"token": e.secret[api.RoleAdmin]}, foreign); st != http.StatusForbidden || out["code"] != "cross_origin" {
			t.Fatalf("sign-in from another origin: %d %v", st, out)
		}
		st, se, resp := e.call(t, "POST", "/console/session", api.RoleNone, map[string]string{"token": e.secret[api.RoleAdmin]}, map[string]string{"Origin": e.url})
		if st != http.StatusOK {
			t.Fatalf("sign-in: %d %v", st, se)
		}
		c := sessionCookie(t, resp)
		csrf := se["csrf"].(string)
		for _, tc := range []struct {
			hdr  map[string]string
			want int
			code string
		}{
			{map[string]string{api.CSRFHeader: csrf, "Origin": "https://evil.example"}, http.StatusForbidden, "cross_origin"},
			{map[string]string{api.CSRFHeader: csrf, "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "cross_origin"},
			{map[string]string{api.CSRFHeader: csrf, "Content-Type": "text/plain"}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
			{map[string]string{api.CSRFHeader: csrf, "Origin": "http://evil.example" + strings.TrimPrefix(e.url, "http://127.0.0.1"),
				"Host": "evil.example" + strings.TrimPrefix(e.url, "http://127.0.0.1")}, http.StatusMisdirectedRequest, "host_not_allowed"},
		} {
			if st, out, _ := e.callHost(t, "POST", "/v1/queues/mail/pause", tc.hdr, c); st != tc.want || out["code"] != tc.code {
				t.Errorf("pause with %v: %d %v, want %d %s", tc.hdr, st, out, tc.want, tc.code)
			}
		}
		if paused, _ := e.lib.PausedQueues(t.Context()); len(paused) != 0 {
			t.Fatalf("refused writes paused %v", paused)
		}
		if st, _, _ := e.callHost(t, "GET", "/", map[string]string{"Host": "evil.example"}); st != http.StatusMisdirectedRequest {
			t.Fatalf("the page under a rebound name: %d, want 421", st)
		}
		if st, out, _ := e.callHost(t, "POST", "/v1/queues/mail/pause", map[string]string{api.CSRFHeader: csrf, "Origin": e.url,
			"Content-Type": "application/json"}, c); st != http.StatusOK {
			t.Fatalf("the console's own pause: %d %v", st, out)
		}
	})
}

// callHost is call without a body and with a Host header among hdr.
func (e *env) callHost(t *testing.T, method, path string, hdr map[string]string, cookies ...*http.Cookie) (int, map[string]any, *http.Response) {
	t.Helper()
	h := map[string]string{}
	host := ""
	for k, v := range hdr {
		if k == "Host" {
			host = v
			continue
		}
		h[k] = v
	}
	if host == "" {
		return e.call(t, method, path, api.RoleNone, nil, h, cookies...)
	}
	req, err := http.NewRequest(method, e.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range h {
		req.Header.Set(k, v)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, resp
}
