package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// guardCall is one request of the guard's tests: real HTTP to the test
// server, with the headers a browser (or an attacker's page) would send.
type guardCall struct {
	method, path, host, origin, fetchSite, contentType, body, auth string
}

func (b *bundle) guarded(t *testing.T, c guardCall) (int, api.Problem) {
	t.Helper()
	req, err := http.NewRequest(c.method, b.ts.URL+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.host != "" {
		req.Host = c.host
	}
	for k, v := range map[string]string{"Origin": c.origin, "Sec-Fetch-Site": c.fetchSite, "Content-Type": c.contentType} {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	if c.auth != "" {
		req.Header.Set("Authorization", "Bearer "+c.auth)
	}
	resp, err := b.as[api.RoleNone].HTTP.Do(req) // the answers are checked against openapi.json too
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var p api.Problem
	if resp.StatusCode >= 400 {
		if resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(raw, &p) != nil {
			t.Fatalf("%s %s: %d %s is not a problem document", c.method, c.path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, p
}

// A page on another origin cannot write through a visitor's browser, in
// any mode: a write is refused with 403 cross_origin when its Origin is not
// the server's own (or Sec-Fetch-Site says cross-site), and with 415 when
// its Content-Type is not JSON (what a no-cors fetch or a form can send);
// a write without a body may leave the type out (curl -X POST). Nothing is
// written by a refused request. Same-origin writes (the console) and
// programs that send no Origin go through.
func TestWritesNeedJSONAndOwnOrigin(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{anonymousAdmin: true, rateLimit: -1})
		own := b.ts.URL // http://127.0.0.1:PORT
		host := strings.TrimPrefix(own, "http://")
		task := `{"queue":"guard","kind":"k","payload":{"x":1}}`
		for _, mode := range []struct{ name, auth string }{{"dev", ""}, {"token", b.secret[api.RoleAdmin]}} {
			for _, c := range []struct {
				call guardCall
				want int
				code string
			}{
				// The no-cors attack: text/plain body, foreign Origin.
				{guardCall{method: "POST", path: "/v1/tasks", origin: "https://evil.example", fetchSite: "cross-site",
					contentType: "text/plain;charset=UTF-8", body: task}, 403, "cross_origin"},
				{guardCall{method: "POST", path: "/v1/queues/guard/pause", origin: "https://evil.example", fetchSite: "cross-site"}, 403, "cross_origin"},
				{guardCall{method: "POST", path: "/v1/queues/guard/pause", origin: "https://evil.example", contentType: "application/json"}, 403, "cross_origin"},
				{guardCall{method: "POST", path: "/v1/queues/guard/pause", origin: "null"}, 403, "cross_origin"},
				{guardCall{method: "POST", path: "/v1/queues/guard/pause", origin: "http://" + host + ".evil.example"}, 403, "cross_origin"},
				{guardCall{method: "POST", path: "/v1/queues/guard/pause", fetchSite: "cross-site", contentType: "application/json"}, 403, "cross_origin"},
				// Another port of the same host is another origin.
				{guardCall{method: "POST", path: "/v1/queues/guard/pause", origin: "http://127.0.0.1:1"}, 403, "cross_origin"},
				// Without an Origin (an old browser, a stripped header) the
				// content type still refuses what a page could send.
				{guardCall{method: "POST", path: "/v1/tasks", contentType: "text/plain", body: task}, 415, "unsupported_media_type"},
				{guardCall{method: "POST", path: "/v1/tasks", contentType: "application/x-www-form-urlencoded", body: "queue=guard"}, 415, "unsupported_media_type"},
				{guardCall{method: "POST", path: "/v1/tasks", contentType: "multipart/form-data; boundary=x", body: "--x--"}, 415, "unsupported_media_type"},
				{guardCall{method: "POST", path: "/v1/tasks", body: task}, 415, "unsupported_media_type"},
				{guardCall{method: "POST", path: "/v1/queues/guard/pause", contentType: "text/plain"}, 415, "unsupported_media_type"},
				{guardCall{method: "POST", path: "/v1/queues/guard/pause", origin: own, contentType: "text/plain"}, 415, "unsupported_media_type"},
			} {
				c.call.auth = mode.auth
				st, p := b.guarded(t, c.call)
				if st != c.want || p.Code != c.code {
					t.Errorf("%s: %+v: %d %s %q, want %d %s", mode.name, c.call, st, p.Code, p.Detail, c.want, c.code)
				}
			}
			if n := countTasks(t, b, "guard"); n != 0 {
				t.Fatalf("%s: refused writes enqueued %d tasks", mode.name, n)
			}
			if paused, _ := b.lib.PausedQueues(t.Context()); len(paused) != 0 {
				t.Fatalf("%s: refused writes paused %v", mode.name, paused)
			}
		}
		// What the console, the CLI and curl send is taken: the same
		// origin (with the JSON type), no origin, a bodiless write without
		// a type, Sec-Fetch-Site same-origin; reads need neither.
		for _, c := range []struct {
			call guardCall
			want int
		}{
			{guardCall{method: "POST", path: "/v1/tasks", origin: own, fetchSite: "same-origin", contentType: "application/json", body: task}, 201},
			{guardCall{method: "POST", path: "/v1/tasks", contentType: "application/json; charset=utf-8", body: task}, 201},
			{guardCall{method: "POST", path: "/v1/queues/guard/pause", origin: own, contentType: "application/json"}, 200},
			{guardCall{method: "POST", path: "/v1/queues/guard/resume"}, 200},
			{guardCall{method: "GET", path: "/v1/queues", origin: "https://evil.example", fetchSite: "cross-site"}, 200},
		} {
			if st, p := b.guarded(t, c.call); st != c.want {
				t.Errorf("%+v: %d %s %q, want %d", c.call, st, p.Code, p.Detail, c.want)
			}
		}
		if n := countTasks(t, b, "guard"); n != 2 {
			t.Fatalf("accepted writes enqueued %d tasks, want 2", n)
		}
	})
}

// A loopback-bound server answers only to loopback host names and the
// configured ones: a name rebound to 127.0.0.1 (DNS rebinding) gets 421
// host_not_allowed on reads and writes alike, nothing written.
func TestLoopbackServerRefusesForeignHosts(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{anonymousAdmin: true, rateLimit: -1, loopbackOnly: true, allowedHosts: []string{"backstop.internal"}})
		u, _ := url.Parse(b.ts.URL)
		port := u.Port()
		task := `{"queue":"rebind","kind":"k"}`
		for _, h := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "localhost.evil.example",
			"10.0.0.1:" + port, "backstop.internal.evil.example", "[::2]:" + port} {
			for _, c := range []guardCall{
				{method: "GET", path: "/v1/queues"},
				{method: "GET", path: "/healthz"},
				{method: "POST", path: "/v1/tasks", origin: "http://" + h, contentType: "application/json", body: task},
				{method: "POST", path: "/v1/queues/rebind/pause", origin: "http://" + h, contentType: "application/json"},
			} {
				c.host = h
				if st, p := b.guarded(t, c); st != http.StatusMisdirectedRequest || p.Code != "host_not_allowed" {
					t.Errorf("Host %s: %s %s: %d %s, want 421 host_not_allowed", h, c.method, c.path, st, p.Code)
				}
			}
		}
		if n := countTasks(t, b, "rebind"); n != 0 {
			t.Fatalf("a rebound host enqueued %d tasks", n)
		}
		if paused, _ := b.lib.PausedQueues(t.Context()); len(paused) != 0 {
			t.Fatalf("a rebound host paused %v", paused)
		}
		for _, h := range []string{"localhost:" + port, "LOCALHOST", "127.0.0.1:" + port, "127.0.0.2", "[::1]:" + port, "[::1]",
			"backstop.internal:" + port, "Backstop.Internal"} {
			c := guardCall{method: "POST", path: "/v1/tasks", host: h, origin: "http://" + h, contentType: "application/json", body: task}
			if st, p := b.guarded(t, c); st != http.StatusCreated {
				t.Errorf("Host %s: %d %s %q, want 201", h, st, p.Code, p.Detail)
			}
		}
		// A proxy that rewrites Host: the allowed name's origin writes.
		c := guardCall{method: "POST", path: "/v1/queues/rebind/pause", origin: "https://backstop.internal", contentType: "application/json"}
		if st, p := b.guarded(t, c); st != http.StatusOK {
			t.Errorf("origin of an allowed host: %d %s %q, want 200", st, p.Code, p.Detail)
		}
	})
}

func countTasks(t *testing.T, b *bundle, queue string) int {
	t.Helper()
	ts, err := b.lib.List(t.Context(), backstop.ListParams{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	return len(ts)
}
