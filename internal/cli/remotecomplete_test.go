package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
)

// completeCounter counts the worker's complete requests: single
// (/v1/tasks/{id}/complete) and batch (/v1/tasks/complete, with the
// completions each carried); noBatch answers the batch endpoint 404, as a
// server without it does.
type completeCounter struct {
	next    http.Handler
	noBatch bool

	mu                   sync.Mutex
	single, batches, all int
}

func (f *completeCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == "POST" && r.URL.Path == "/v1/tasks/complete" {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var req struct {
			Completions []json.RawMessage `json:"completions"`
		}
		_ = json.Unmarshal(b, &req)
		f.mu.Lock()
		f.batches++
		f.all += len(req.Completions)
		f.mu.Unlock()
		if f.noBatch {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Not Found","status":404,"code":"no_route","detail":"no endpoint /v1/tasks/complete"}`))
			return
		}
	} else if r.Method == "POST" && len(r.URL.Path) > len("/complete") && r.URL.Path[len(r.URL.Path)-len("/complete"):] == "/complete" {
		f.mu.Lock()
		f.single++
		f.mu.Unlock()
	}
	f.next.ServeHTTP(w, r)
}

// TestRemoteWorkCompletesInBatches: `work --server` reports its successes
// through the batch endpoint, many a request when slots finish together;
// against a server without it (404), one request per task, all settled.
func TestRemoteWorkCompletesInBatches(t *testing.T) {
	t.Parallel()
	for _, noBatch := range []bool{false, true} {
		name := map[bool]string{false: "batch endpoint", true: "no batch endpoint"}[noBatch]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const tasks = 300
			e := &cliEnv{t: t, db: testdb.SQLite(t)}
			e.ok("migrate")
			lib := remoteClientFor(t, e.db)
			ps := make([]backstop.EnqueueParams, tasks)
			for i := range ps {
				ps[i] = backstop.EnqueueParams{Queue: "bq", Kind: "k"}
			}
			if _, err := lib.EnqueueMany(context.Background(), ps); err != nil {
				t.Fatal(err)
			}
			var f *completeCounter
			url := frontedAPIServer(t, e.db, func(next http.Handler, _ *backstop.Client) http.Handler {
				f = &completeCounter{next: next, noBatch: noBatch}
				return f
			})
			work := e.run("", "--server", url, "work", "--queue", "bq", "--concurrency", "32", "--exit-after-idle", "500ms", "--", "true")
			if work.code != 0 {
				t.Fatalf("work: %+v", work)
			}
			left, err := lib.List(context.Background(), backstop.ListParams{Queue: "bq",
				States: []bt.State{bt.StatePending, bt.StateRunning, bt.StateDead}, Limit: 5})
			if err != nil || len(left) > 0 {
				t.Fatalf("tasks not succeeded: %v %v", left, err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			t.Logf("%d tasks: %d batch requests carrying %d completions, %d single", tasks, f.batches, f.all, f.single)
			if noBatch {
				if f.single != tasks || f.batches < 1 {
					t.Errorf("without the batch endpoint: %d single requests (want %d), %d batch tries", f.single, tasks, f.batches)
				}
				return
			}
			if f.single != 0 || f.all != tasks || f.batches >= tasks {
				t.Errorf("%d single requests (want 0), %d batch requests carrying %d completions (want %d, in fewer requests)",
					f.single, f.batches, f.all, tasks)
			}
		})
	}
}
