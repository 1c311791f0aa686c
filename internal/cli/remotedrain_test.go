package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestRemoteDrainReadsTheClaimAnswer forces the interleaving a drain used to
// lose a task in: the server's claim has committed (the task is leased to
// the worker) and its answer is on its way when the worker drains. A front
// holds the answer until the worker either hangs up on the claim (what a
// drain did: the answer then goes nowhere, and the task stays running
// until its lease expires, charged as lease_expired) or stops it by its
// claim id (the fix: the worker then reads the answer and gives the task
// back uncharged). The drain is --exit-after-idle's, which comes while
// the second claim is out.
func TestRemoteDrainReadsTheClaimAnswer(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := &cliEnv{t: t, db: url(t)}
			e.ok("migrate")
			ctx := context.Background()
			var (
				claims   atomic.Int32
				id       atomic.Pointer[string]
				stopped  = make(chan struct{})
				stopOnce sync.Once
				hungUp   atomic.Bool
			)
			srv := frontedAPIServer(t, e.db, func(next http.Handler, lib *backstop.Client) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if strings.HasPrefix(r.URL.Path, "/v1/claims/") {
						stopOnce.Do(func() { close(stopped) })
						next.ServeHTTP(w, r)
						return
					}
					if r.URL.Path != "/v1/claim" || claims.Add(1) != 2 {
						next.ServeHTTP(w, r)
						return
					}
					// The second claim: there is a task for it now, the
					// server claims it, and its answer is held.
					res, err := lib.Enqueue(ctx, backstop.EnqueueParams{Queue: "hold", Kind: "k"})
					if err != nil {
						t.Error(err)
						return
					}
					id.Store(&res.Task.ID)
					rec := httptest.NewRecorder()
					next.ServeHTTP(rec, r)
					select {
					case <-r.Context().Done():
						hungUp.Store(true)
					case <-stopped:
					case <-time.After(30 * time.Second):
						t.Error("the worker neither stopped nor hung up on its claim")
					}
					for k, v := range rec.Header() {
						w.Header()[k] = v
					}
					w.WriteHeader(rec.Code)
					_, _ = w.Write(rec.Body.Bytes())
				})
			})
			work := e.run("", "--server", srv, "work", "--queue", "hold", "--exit-after-idle", "300ms", "--log-level", "debug", "--", "true")
			if work.code != 0 {
				t.Fatalf("work: %+v", work)
			}
			if id.Load() == nil {
				t.Fatalf("the worker sent %d claims, want a second one; log:\n%s", claims.Load(), work.stderr)
			}
			if hungUp.Load() {
				t.Errorf("the worker hung up on a claim that had leased a task")
			}
			task, err := remoteClientFor(t, e.db).Get(ctx, *id.Load())
			if err != nil {
				t.Fatal(err)
			}
			ex := task.Executions
			if task.State != bt.StatePending || task.Attempt != 0 || len(ex) != 1 || ex[0].Outcome != bt.OutcomeReleased {
				t.Fatalf("after the drain: state %s attempt %d executions %+v; want pending, attempt 0, one released execution; log:\n%s",
					task.State, task.Attempt, ex, work.stderr)
			}
		})
	}
}

// TestRemoteWorkOlderServer: against a server older than claim_id (it
// refuses the unknown key, as decodeJSON does), `work --server` claims
// without it, once told, and works its queue as before.
func TestRemoteWorkOlderServer(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	e.ok("migrate")
	lib := remoteClientFor(t, e.db)
	ps := make([]backstop.EnqueueParams, 20)
	for i := range ps {
		ps[i] = backstop.EnqueueParams{Queue: "old", Kind: "k"}
	}
	if _, err := lib.EnqueueMany(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	srv := frontedAPIServer(t, e.db, func(next http.Handler, _ *backstop.Client) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/v1/claims/") {
				http.NotFound(w, r)
				return
			}
			if r.URL.Path == "/v1/claim" {
				b, _ := io.ReadAll(r.Body)
				if bytes.Contains(b, []byte(`"claim_id"`)) {
					refused.Add(1)
					w.Header().Set("Content-Type", "application/problem+json")
					w.WriteHeader(http.StatusBadRequest)
					_, _ = io.WriteString(w, `{"type":"about:blank","title":"The request body is not valid JSON","status":400,"code":"invalid_json","detail":"unknown key \"claim_id\""}`)
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(b))
			}
			next.ServeHTTP(w, r)
		})
	})
	work := e.run("", "--server", srv, "work", "--queue", "old", "--exit-after-idle", "300ms", "--", "true")
	if work.code != 0 {
		t.Fatalf("work: %+v", work)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("%d claims refused for claim_id, want 1 (then claims without it)", n)
	}
	if n := strings.Count(work.stderr, "does not know claim_id"); n != 1 {
		t.Errorf("%d warnings about claim_id, want 1; log:\n%s", n, work.stderr)
	}
	left, err := lib.List(context.Background(), backstop.ListParams{Queue: "old",
		States: []bt.State{bt.StatePending, bt.StateRunning, bt.StateDead}, Limit: 5})
	if err != nil || len(left) > 0 {
		t.Fatalf("tasks not succeeded: %v %v", left, err)
	}
}

// TestRemoteDrainStopBehindBalancer: the drain's stop reaches another
// server than the one holding the claim (a balancer between them), which
// does not hold it; the worker sends it again until the claim's own
// server gets it, reads the answer and gives the task back uncharged.
func TestRemoteDrainStopBehindBalancer(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	e.ok("migrate")
	ctx := context.Background()
	lib := remoteClientFor(t, e.db)
	same := func(next http.Handler, _ *backstop.Client) http.Handler { return next }
	a, b := proxyTo(t, frontedAPIServer(t, e.db, same)), proxyTo(t, frontedAPIServer(t, e.db, same))
	var (
		claims, stops atomic.Int32
		id            atomic.Pointer[string]
		atA           = make(chan struct{})
		atAOnce       sync.Once
	)
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/claims/") {
			if stops.Add(1) == 1 {
				b.ServeHTTP(w, r) // the first stop goes to the other server
				return
			}
			atAOnce.Do(func() { close(atA) })
			a.ServeHTTP(w, r)
			return
		}
		if r.URL.Path != "/v1/claim" || claims.Add(1) != 2 {
			a.ServeHTTP(w, r)
			return
		}
		res, err := lib.Enqueue(ctx, backstop.EnqueueParams{Queue: "lb", Kind: "k"})
		if err != nil {
			t.Error(err)
			return
		}
		id.Store(&res.Task.ID)
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, r)
		select {
		case <-r.Context().Done():
			t.Error("the worker hung up on a claim that had leased a task")
		case <-atA:
		case <-time.After(30 * time.Second):
			t.Error("no stop reached the claim's server")
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(lb.Close)
	work := e.run("", "--server", lb.URL, "work", "--queue", "lb", "--exit-after-idle", "300ms", "--", "true")
	if work.code != 0 {
		t.Fatalf("work: %+v", work)
	}
	if id.Load() == nil {
		t.Fatalf("the worker sent %d claims, want a second one", claims.Load())
	}
	if n := stops.Load(); n < 2 {
		t.Errorf("%d stops, want the one the other server did not hold and one more", n)
	}
	task, err := lib.Get(ctx, *id.Load())
	if err != nil {
		t.Fatal(err)
	}
	if ex := task.Executions; task.State != bt.StatePending || task.Attempt != 0 || len(ex) != 1 || ex[0].Outcome != bt.OutcomeReleased {
		t.Fatalf("after the drain: state %s attempt %d executions %+v; log:\n%s", task.State, task.Attempt, ex, work.stderr)
	}
}

// proxyTo is a reverse proxy to the server at base.
func proxyTo(t *testing.T, base string) http.Handler {
	u, err := neturl.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return httputil.NewSingleHostReverseProxy(u)
}
