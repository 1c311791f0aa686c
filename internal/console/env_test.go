package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/console"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// testClock is the wall clock plus an offset tests move forward.
type testClock struct{ off atomic.Int64 }

func (c *testClock) Now() time.Time {
	return time.Now().UTC().Add(time.Duration(c.off.Load())).Truncate(time.Microsecond)
}
func (c *testClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// env is a real server (the API with the console mounted, as `backstop
// serve` does) on loopback over a real store.
type env struct {
	url    string
	srv    *api.Server
	store  store.Store
	lib    *backstop.Client
	clock  *testClock
	secret map[api.Role]string
}

type envOpts struct {
	dev        bool
	sessionTTL time.Duration
	queues     map[string]backstop.QueueConfig // the server's declared queues
	// wrap, when set, stands between the browser and the server (a test
	// holding back one call).
	wrap func(http.Handler) http.Handler
}

// forStores runs fn on SQLite and on Postgres, in parallel.
func forStores(t *testing.T, fn func(t *testing.T, dbURL string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); fn(t, testdb.SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); fn(t, testdb.Postgres(t)) })
}

func newEnv(t testing.TB, dbURL string, o envOpts) *env {
	t.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	clk := &testClock{}
	lib, err := backstop.NewClient(s, &backstop.Config{Clock: clk, Queues: o.queues})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Client: lib, Logger: slog.New(slog.DiscardHandler), AnonymousAdmin: o.dev,
		SessionTTL: o.sessionTTL, PollInterval: 5 * time.Second, LoopbackOnly: true}) // as serve on loopback
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = console.Handler(srv)
	if o.wrap != nil {
		h = o.wrap(h)
	}
	ts := httptest.NewUnstartedServer(h)
	ts.Config.RegisterOnShutdown(srv.Close)
	ts.Start()
	t.Cleanup(func() { ts.CloseClientConnections(); ts.Close(); srv.Close() })
	e := &env{url: ts.URL, srv: srv, store: s, lib: lib, clock: clk, secret: map[api.Role]string{}}
	for _, r := range []api.Role{api.RoleViewer, api.RoleOperator, api.RoleAdmin} {
		sec, _, err := api.CreateToken(ctx, s.(store.Tokens), "console-"+r.String(), r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		e.secret[r] = sec
	}
	return e
}

// call makes one HTTP request: a bearer token when role is set, extra
// headers and cookies as given; it answers the status and the decoded JSON
// body (nil when there is none).
func (e *env) call(t *testing.T, method, path string, role api.Role, body any, hdr map[string]string, cookies ...*http.Cookie) (int, map[string]any, *http.Response) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if role != api.RoleNone {
		req.Header.Set("Authorization", "Bearer "+e.secret[role])
	}
	for k, v := range hdr {
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
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(bytes.TrimSpace(raw)) > 0 && strings.Contains(resp.Header.Get("Content-Type"), "json") {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode, out, resp
}

// enqueue adds a task through the API as the operator; it answers its id.
func (e *env) enqueue(t *testing.T, task map[string]any) string {
	t.Helper()
	st, out, _ := e.call(t, "POST", "/v1/tasks", api.RoleOperator, task, nil)
	if st != http.StatusCreated {
		t.Fatalf("enqueue: %d %v", st, out)
	}
	return out["task"].(map[string]any)["id"].(string)
}

// deadLetter enqueues a task, claims it as a remote worker, writes log
// lines and fails it permanently with errText: it answers the dead
// letter's id.
func (e *env) deadLetter(t *testing.T, task map[string]any, errText string, logLines ...string) string {
	t.Helper()
	id := e.enqueue(t, task)
	q := task["queue"].(string)
	for deadline := time.Now().Add(30 * time.Second); ; {
		st, out, _ := e.call(t, "POST", "/v1/claim", api.RoleOperator, map[string]any{"queues": []string{q}, "worker_id": "console-test", "max": 1}, nil)
		if st != http.StatusOK {
			t.Fatalf("claim: %d %v", st, out)
		}
		tasks, _ := out["tasks"].([]any)
		if len(tasks) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("task %s never became claimable", id)
			}
			continue
		}
		ct := tasks[0].(map[string]any)
		lease := ct["lease_token"].(string)
		if len(logLines) > 0 {
			lines := []map[string]string{}
			for _, l := range logLines {
				lines = append(lines, map[string]string{"stream": "output", "line": l})
			}
			if st, out, _ := e.call(t, "POST", "/v1/tasks/"+ct["id"].(string)+"/logs", api.RoleOperator,
				map[string]any{"lease_token": lease, "lines": lines}, nil); st != http.StatusOK {
				t.Fatalf("logs: %d %v", st, out)
			}
		}
		if st, out, _ := e.call(t, "POST", "/v1/tasks/"+ct["id"].(string)+"/fail", api.RoleOperator,
			map[string]any{"lease_token": lease, "outcome": "permanent_error", "error": errText}, nil); st != http.StatusOK {
			t.Fatalf("fail: %d %v", st, out)
		}
		if ct["id"] == id {
			return id
		}
	}
}

func (e *env) task(t *testing.T, id string) *backstop.Task {
	t.Helper()
	tk, err := e.lib.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func testdbSQLite(t *testing.T) string { return testdb.SQLite(t) }
