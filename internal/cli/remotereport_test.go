package cli

// `work --server` reports a settled attempt until the server takes it or the
// lease is truly lost (issue 13, item 1), against a real API server on a
// real SQLite file behind a front that fails chosen requests.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/internal/testdb"
)

// frontedAPIServer serves the API on db behind the handler front makes.
func frontedAPIServer(t *testing.T, db string, front func(next http.Handler, lib *backstop.Client) http.Handler) string {
	t.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Client: c, Logger: slog.New(slog.DiscardHandler), AnonymousAdmin: true, RateLimit: -1})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: front(srv, c), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		_ = hs.Close()
		srv.Close()
		s.Close()
	})
	return "http://" + ln.Addr().String()
}

// reportFront fails or passes the worker's requests as decide says; it
// counts the complete requests.
type reportFront struct {
	next   http.Handler
	lib    *backstop.Client
	mu     sync.Mutex
	first  time.Time // the first complete request
	counts map[string]int
	decide func(f *reportFront, r *http.Request, lease string) (status int, cut bool)
}

func (f *reportFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	var lease string
	if r.Method == "POST" && r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		var req struct {
			LeaseToken  string `json:"lease_token"`
			Completions []struct {
				LeaseToken string `json:"lease_token"`
			} `json:"completions"` // a batch complete: its first lease
		}
		_ = json.Unmarshal(b, &req)
		lease = req.LeaseToken
		if len(req.Completions) > 0 {
			lease = req.Completions[0].LeaseToken
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	f.mu.Lock()
	if kind == "complete" && f.first.IsZero() {
		f.first = time.Now()
	}
	f.counts[kind]++
	f.mu.Unlock()
	status, cut := f.decide(f, r, lease)
	switch {
	case status != 0:
		w.WriteHeader(status)
		_, _ = w.Write([]byte("upstream unavailable"))
	case cut:
		f.next.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	default:
		f.next.ServeHTTP(w, r)
	}
}

func (f *reportFront) since() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first.IsZero() {
		return 0
	}
	return time.Since(f.first)
}

func (f *reportFront) count(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[kind]
}

// workerLines are the worker's JSON log lines about a task.
func workerLines(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

func TestRemoteWorkReportRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// decide fails requests; lib lets it settle the lease elsewhere.
		decide func(f *reportFront, r *http.Request, lease string) (int, bool)
		// want: the task's state, its executions' outcomes, whether
		// "task succeeded" is logged, the give-up reason (if any).
		state      bt.State
		outcome    bt.Outcome
		succeeded  bool
		gaveUp     string
		minRetries int
	}{{
		// The report is refused (503) for longer than the report floor
		// (5s) and the lease (4s): the heartbeats keep the lease, so the
		// report is retried until it lands.
		name: "kept by heartbeats",
		decide: func(f *reportFront, r *http.Request, _ string) (int, bool) {
			if strings.HasSuffix(r.URL.Path, "/complete") && f.since() < remoteReportFloor+2*time.Second {
				return http.StatusServiceUnavailable, false
			}
			return 0, false
		},
		state: bt.StateSucceeded, outcome: bt.OutcomeSucceeded, succeeded: true, minRetries: 2,
	}, {
		// The server is gone for good once the program ends: neither
		// heartbeats nor the report get through, and the worker gives up
		// when the lease (and the report floor) has run out.
		name: "lease expired",
		decide: func(f *reportFront, r *http.Request, _ string) (int, bool) {
			if f.since() > 0 && r.URL.Path != "/v1/claim" {
				return http.StatusServiceUnavailable, false
			}
			return 0, false
		},
		state: bt.StateRunning, gaveUp: "the lease expired", minRetries: 2,
	}, {
		// Someone else settled the lease (here: failed it) before the
		// report arrived: 409, the history shows another outcome, the
		// report is lost at once.
		name: "lease lost",
		decide: func(f *reportFront, r *http.Request, lease string) (int, bool) {
			if strings.HasSuffix(r.URL.Path, "/complete") && f.count("complete") == 1 {
				if _, err := remote.New(f.lib.Engine()).Fail(context.Background(), remote.Failure{TaskID: "t1", LeaseToken: lease,
					Outcome: bt.OutcomePermanentError, Error: "settled elsewhere"}); err != nil {
					panic(err)
				}
			}
			return 0, false
		},
		state: bt.StateDead, outcome: bt.OutcomePermanentError, gaveUp: "the lease is lost",
	}, {
		// The first try lands but its answer is cut off: the retry gets
		// 409, the history shows this lease succeeded, and that is a
		// success.
		name: "answer lost",
		decide: func(f *reportFront, r *http.Request, _ string) (int, bool) {
			return 0, strings.HasSuffix(r.URL.Path, "/complete") && f.count("complete") == 1
		},
		state: bt.StateSucceeded, outcome: bt.OutcomeSucceeded, succeeded: true, minRetries: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := &cliEnv{t: t, db: testdb.SQLite(t)}
			e.ok("enqueue", "--queue", "rq", "--kind", "k", "--id", "t1", "--max-attempts", "1")
			var f *reportFront
			url := frontedAPIServer(t, e.db, func(next http.Handler, lib *backstop.Client) http.Handler {
				f = &reportFront{next: next, lib: lib, counts: map[string]int{}, decide: tc.decide}
				return f
			})
			work := e.run("", "--server", url, "work", "--queue", "rq", "--concurrency", "1", "--lease", "4s", "--exit-after-idle", "300ms",
				"--", "sh", "-c", "echo hello; exit 0")
			if work.code != 0 {
				t.Fatalf("work: %+v", work)
			}
			var succeeded, retries int
			var gaveUp map[string]any
			for _, rec := range workerLines(t, work.stderr) {
				switch rec["msg"] {
				case "task succeeded":
					succeeded++
				case "reporting the attempt failed; retrying":
					retries++
				case "gave up reporting the attempt":
					gaveUp = rec
				}
			}
			if (succeeded == 1) != tc.succeeded || succeeded > 1 {
				t.Errorf("\"task succeeded\" logged %d times", succeeded)
			}
			if retries < tc.minRetries || (tc.name == "lease lost" && retries != 0) {
				t.Errorf("%d report retries logged", retries)
			}
			switch {
			case tc.gaveUp == "" && gaveUp != nil:
				t.Errorf("gave up: %v", gaveUp)
			case tc.gaveUp != "" && (gaveUp == nil || !strings.Contains(gaveUp["reason"].(string), tc.gaveUp) || gaveUp["outcome"] != "succeeded"):
				t.Errorf("give-up line %v, want reason %q for outcome succeeded", gaveUp, tc.gaveUp)
			}
			task, err := remoteClientFor(t, e.db).Get(context.Background(), "t1")
			if err != nil {
				t.Fatal(err)
			}
			if task.State != tc.state || (tc.outcome != "" && (len(task.Executions) != 1 || task.Executions[0].Outcome != tc.outcome)) {
				t.Errorf("task %s after %d executions %+v, want %s (%s)", task.State, len(task.Executions), task.Executions, tc.state, tc.outcome)
			}
			if t.Failed() {
				t.Logf("worker stdout:\n%s\nstderr:\n%s", work.stdout, work.stderr)
			}
		})
	}
}

func remoteClientFor(t *testing.T, db string) *backstop.Client {
	t.Helper()
	s, err := dburl.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
