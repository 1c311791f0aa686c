package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

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
	// tooLarge: a batch of more than one completion is answered 413; each
	// batch is held a moment first, so the completions that finish
	// meanwhile gather into the next one whatever the machine's pace.
	tooLarge bool

	mu                   sync.Mutex
	single, batches, all int
	maxBody              int // the largest batch body
	resultBytes          int // the results' bytes the batches carried
}

func (f *completeCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == "POST" && r.URL.Path == "/v1/tasks/complete" {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var req struct {
			Completions []struct {
				Result json.RawMessage `json:"result"`
			} `json:"completions"`
		}
		_ = json.Unmarshal(b, &req)
		f.mu.Lock()
		for _, c := range req.Completions {
			f.resultBytes += len(c.Result)
		}
		f.batches++
		f.all += len(req.Completions)
		f.maxBody = max(f.maxBody, len(b))
		f.mu.Unlock()
		if f.tooLarge {
			time.Sleep(300 * time.Millisecond)
		}
		if f.tooLarge && len(req.Completions) > 1 {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Request Entity Too Large","status":413,"code":"too_large","detail":"request body too large"}`))
			return
		}
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
			var f *completeCounter
			remoteDrain(t, "bq", tasks, func(next http.Handler) http.Handler {
				f = &completeCounter{next: next, noBatch: noBatch}
				return f
			})
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

// TestRemoteWorkBatchBounds: a batch carries results of at most about
// 1 MiB in all (results of 600 KB go one a batch, each intact), and a
// batch the server refuses as too large (413) is reported item by item.
func TestRemoteWorkBatchBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		tooLarge bool
		program  []string
	}{
		{"large results", false, []string{"sh", "-c", `printf '"%s"' "$(head -c 600000 /dev/zero | tr '\0' a)" > "$BACKSTOP_RESULT_FILE"`}},
		{"413", true, []string{"true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const tasks = 8
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
				f = &completeCounter{next: next, tooLarge: tc.tooLarge}
				return f
			})
			work := e.run("", append([]string{"--server", url, "work", "--queue", "bq", "--concurrency", "8",
				"--exit-after-idle", "500ms", "--"}, tc.program...)...)
			if work.code != 0 {
				t.Fatalf("work: %+v", work)
			}
			done, err := lib.List(context.Background(), backstop.ListParams{Queue: "bq", States: []bt.State{bt.StateSucceeded}, Limit: 100})
			if err != nil || len(done) != tasks {
				t.Fatalf("%d of %d tasks succeeded (%v)\n%s", len(done), tasks, err, work.stderr)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			t.Logf("%d batch requests carrying %d completions (largest body %d bytes), %d single", f.batches, f.all, f.maxBody, f.single)
			if tc.tooLarge {
				if f.single < 1 || f.single+f.all < tasks {
					t.Errorf("after 413: %d single reports", f.single)
				}
				return
			}
			if f.maxBody > 1_300_000 || f.single != 0 {
				t.Errorf("largest batch body %d bytes (want one 600 KB result a batch), %d single reports", f.maxBody, f.single)
			}
			if f.resultBytes != tasks*600_002 {
				t.Errorf("the batches carried %d bytes of results, want %d (each intact, each once)", f.resultBytes, tasks*600_002)
			}
		})
	}
}

// remoteDrain enqueues n tasks of kind k into queue on a fresh SQLite
// database, runs `work --server --concurrency 32 -- true` against an API
// server whose handler front wraps, until idle, and fails unless every
// task succeeded.
func remoteDrain(t *testing.T, queue string, n int, front func(next http.Handler) http.Handler) {
	t.Helper()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	e.ok("migrate")
	lib := remoteClientFor(t, e.db)
	ps := make([]backstop.EnqueueParams, n)
	for i := range ps {
		ps[i] = backstop.EnqueueParams{Queue: queue, Kind: "k"}
	}
	if _, err := lib.EnqueueMany(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	url := frontedAPIServer(t, e.db, func(next http.Handler, _ *backstop.Client) http.Handler { return front(next) })
	work := e.run("", "--server", url, "work", "--queue", queue, "--concurrency", "32", "--exit-after-idle", "500ms", "--", "true")
	if work.code != 0 {
		t.Fatalf("work: %+v", work)
	}
	left, err := lib.List(context.Background(), backstop.ListParams{Queue: queue,
		States: []bt.State{bt.StatePending, bt.StateRunning, bt.StateDead}, Limit: 5})
	if err != nil || len(left) > 0 {
		t.Fatalf("tasks not succeeded: %v %v", left, err)
	}
}
