package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/apiclient"
)

// browserWrite sends what a page's fetch would: its Origin, Sec-Fetch-Site,
// a content type, a body; host, when set, is the Host header (a rebound
// name). It answers the status and the problem's code.
func browserWrite(t *testing.T, method, u, host, origin, site, ct, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range map[string]string{"Origin": origin, "Sec-Fetch-Site": site, "Content-Type": ct} {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	if site == "cross-site" {
		req.Header.Set("Sec-Fetch-Mode", "no-cors")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	code := ""
	if i := strings.Index(string(raw), `"code":"`); i >= 0 {
		code, _, _ = strings.Cut(string(raw)[i+len(`"code":"`):], `"`)
	}
	return resp.StatusCode, code
}

// `serve --dev` on loopback, the real binary: a page on another origin
// cannot enqueue or pause a queue through a no-cors fetch (text/plain
// body, its own Origin), and a name rebound to 127.0.0.1 is refused
// (421), reads included; nothing is written. The Go client's writes,
// bodiless ones included, still go through; a configured allowed host
// (BACKSTOP_ALLOWED_HOSTS) is answered.
func TestServeDevRefusesOtherOriginsAndHosts(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db := st.url(t)
			base := startServer(t, db) // serve --dev --addr 127.0.0.1:0
			u, _ := url.Parse(base)
			task := `{"queue":"victim","kind":"k","payload":{"steal":true}}`
			for _, c := range []struct {
				method, path, host, origin, site, ct, body string
				status                                     int
				code                                       string
			}{
				{"POST", "/v1/tasks", "", "https://evil.example", "cross-site", "text/plain;charset=UTF-8", task, 403, "cross_origin"},
				{"POST", "/v1/queues/victim/pause", "", "https://evil.example", "cross-site", "text/plain;charset=UTF-8", "", 403, "cross_origin"},
				{"POST", "/v1/queues/victim/pause", "", "https://evil.example", "cross-site", "", "", 403, "cross_origin"},
				{"POST", "/v1/tasks", "", "", "", "text/plain;charset=UTF-8", task, 415, "unsupported_media_type"},
				// A Blob body without a type: no Content-Type at all.
				{"POST", "/v1/tasks", "", "https://evil.example", "cross-site", "", task, 403, "cross_origin"},
				{"POST", "/v1/tasks", "", "", "", "", task, 415, "unsupported_media_type"},
				{"POST", "/console/session", "", "https://evil.example", "cross-site", "application/json", `{"token":"bst_x"}`, 403, "cross_origin"},
				// DNS rebinding: the page's own name, now resolving to 127.0.0.1.
				{"GET", "/v1/tasks?queue=victim", "evil.example:" + u.Port(), "", "", "", "", 421, "host_not_allowed"},
				{"GET", "/", "evil.example:" + u.Port(), "", "", "", "", 421, "host_not_allowed"},
				{"POST", "/v1/tasks", "evil.example:" + u.Port(), "http://evil.example:" + u.Port(), "same-origin", "application/json", task, 421, "host_not_allowed"},
				{"POST", "/v1/queues/victim/pause", "evil.example:" + u.Port(), "http://evil.example:" + u.Port(), "same-origin", "application/json", "", 421, "host_not_allowed"},
			} {
				if status, code := browserWrite(t, c.method, base+c.path, c.host, c.origin, c.site, c.ct, c.body); status != c.status || code != c.code {
					t.Errorf("%s %s (Host %q, Origin %q, %q): %d %s, want %d %s", c.method, c.path, c.host, c.origin, c.ct, status, code, c.status, c.code)
				}
			}
			ctx := context.Background()
			cl := apiclient.New(base, "")
			qs, err := cl.Queues(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range qs.Items {
				if q.Name == "victim" {
					t.Fatalf("refused requests left queue victim with %d tasks, paused %v", q.Total, q.Paused)
				}
			}
			// The Go client: a write with a body and a bodiless one.
			if _, err := cl.Enqueue(ctx, apiclient.Task{Queue: "victim", Kind: "k"}); err != nil {
				t.Fatalf("the Go client's enqueue: %v", err)
			}
			if r, err := cl.PauseQueue(ctx, "victim"); err != nil || !r.Paused {
				t.Fatalf("the Go client's pause: %+v %v", r, err)
			}
			// The console page over localhost and [::1] (loopback names).
			for _, h := range []string{"localhost:" + u.Port(), "[::1]:" + u.Port()} {
				if status, _ := browserWrite(t, "GET", base+"/", h, "", "", "", ""); status != 200 {
					t.Errorf("GET / with Host %s: %d, want 200", h, status)
				}
			}

			// A configured host name is answered, and its origin writes.
			addr := freeAddr(t)
			startServeProc(t, addr, []string{"BACKSTOP_ALLOWED_HOSTS=backstop.test"}, "--db", db, "serve", "--dev", "--addr", addr, "--maintenance-interval", "0")
			_, port, _ := strings.Cut(addr, ":")
			if status, code := browserWrite(t, "POST", "http://"+addr+"/v1/queues/victim/resume", "backstop.test:"+port, "http://backstop.test:"+port,
				"same-origin", "application/json", ""); status != 200 {
				t.Fatalf("an allowed host: %d %s, want 200", status, code)
			}
			if status, code := browserWrite(t, "GET", "http://"+addr+"/v1/queues", "other.test:"+port, "", "", "", ""); status != 421 {
				t.Fatalf("a host not allowed: %d %s, want 421", status, code)
			}
			lib := remoteClient(t, db)
			if paused, err := lib.PausedQueues(ctx); err != nil || len(paused) != 0 {
				t.Fatalf("after the allowed host's resume: paused %v %v", paused, err)
			}
		})
	}
}
