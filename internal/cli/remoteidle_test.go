package cli

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestRemoteWorkExitAfterIdleWaitsForSlowClaim: `work --server
// --exit-after-idle` exits only once a claim came back empty — not while
// a claim is still on its way (a slow or busy server), which would drop
// the task that claim brings (released by the server, never run).
func TestRemoteWorkExitAfterIdleWaitsForSlowClaim(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "admin")
		target, err := url.Parse(r.url)
		if err != nil {
			t.Fatal(err)
		}
		proxy := httputil.NewSingleHostReverseProxy(target)
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.HasSuffix(req.URL.Path, "/claim") {
				time.Sleep(800 * time.Millisecond) // a busy server: every claim takes longer than the idle time
			}
			proxy.ServeHTTP(w, req)
		}))
		t.Cleanup(slow.Close)
		r.url = slow.URL
		r.remote("", "enqueue", "--queue", "iq", "--kind", "k", "--id", "slow-1")
		work := r.remote("", "work", "--queue", "iq", "--exit-after-idle", "200ms", "--", "sh", "-c", "echo ran")
		if work.code != 0 {
			t.Fatalf("work --server: %+v", work)
		}
		var tk struct{ State string }
		e.json(&tk, "tasks", "show", "slow-1")
		if tk.State != "succeeded" {
			t.Fatalf("the task claimed by the slow claim is %s, want succeeded\n%s", tk.State, work.stderr)
		}
	})
}
