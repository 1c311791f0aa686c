package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
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
