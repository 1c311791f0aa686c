package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// fuzzServer is the API in-process (the same handler chain a listener
// gets), anonymous admin unless a token is sent, with short claim waits.
func fuzzServer(f *testing.F) (*api.Server, string) {
	ctx := context.Background()
	s, err := dburl.Open(ctx, testdb.SQLite(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		f.Fatal(err)
	}
	lib, err := backstop.NewClient(s, nil)
	if err != nil {
		f.Fatal(err)
	}
	srv, err := api.New(api.Options{Client: lib, AnonymousAdmin: true, RateLimit: -1, MaxWait: 10 * time.Millisecond,
		MaxBodyBytes: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Close)
	sec, _, err := api.CreateToken(ctx, s.(store.Tokens), "fuzz", api.RoleViewer, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	// A running task, so the worker endpoints reach their deeper paths.
	if _, err := lib.Enqueue(ctx, backstop.EnqueueParams{ID: "t1", Queue: "q", Kind: "k"}); err != nil {
		f.Fatal(err)
	}
	if _, err := remote.New(lib.Engine()).Claim(ctx, remote.Claim{Queues: []string{"q"}, WorkerID: "w"}); err != nil {
		f.Fatal(err)
	}
	return srv, sec
}

// checkAnswer: no 5xx, no panic (the recover middleware would answer 500),
// and every error is a problem document with a code.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, what string) {
	t.Helper()
	if rec.Code >= 500 || rec.Code == 0 {
		t.Fatalf("%s: status %d: %s", what, rec.Code, rec.Body.Bytes())
	}
	if rec.Code >= 400 {
		var p api.Problem
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Code == "" || p.Status != rec.Code {
			t.Fatalf("%s: status %d without a problem document: %s", what, rec.Code, rec.Body.Bytes())
		}
	}
}

var fuzzPaths = []string{"/v1/tasks", "/v1/tasks/batch", "/v1/claim", "/v1/tasks/t1/heartbeat", "/v1/tasks/t1/progress",
	"/v1/tasks/t1/complete", "/v1/tasks/t1/fail", "/v1/tasks/t1/cancel",
	"/v1/dlq/t1/replay", "/v1/dlq/t1/discard", "/v1/dlq/t1/resolve", "/v1/dlq/redrive", "/v1/dlq/purge", "/v1/queues/fq/pause",
	"/v1/tasks/t1/logs", "/v1/tasks/t1/release", "/v1/tasks/complete", "/v1/runs/batch"}

func FuzzRequestBodies(f *testing.F) {
	srv, _ := fuzzServer(f)
	for i, body := range []string{
		`{"queue":"q","kind":"k","payload":{"a":1},"attributes":{"x":"y"},"retry":{"schedule":["1s"]},"run_at":"2030-01-01T00:00:00Z"}`,
		`{"tasks":[{"queue":"q","kind":"k"},{"queue":"q","kind":"k","delay":"1m"}]}`,
		`{"queues":["q"],"worker_id":"w","max":5,"wait":"5ms","lease":"10s"}`,
		`{"lease_token":"x","progress":{"total_steps":3,"completed_steps":1},"lease":"1m"}`,
		`{"lease_token":"x","progress":{"total_steps":-3,"completed_steps":1}}`,
		`{"lease_token":"x"}`,
		`{"lease_token":"x","outcome":"transient_error","retry_after":"1s","error":"e","error_detail":"d"}`,
		`{}`, `null`, `[]`, `{"tasks":null}`, `{"queue":1}`, `{"timeout":"1x"}`, `{"deadline":"yesterday"}`,
		`{"patch":{"a.b":1,"c":null},"merge_patch":{"x":null},"keep_attempts":true,"delay":"1m","new_id":true}`,
		`{"patch":[{"path":"a","value":1},{"path":""}],"run_at":"2030-01-01T00:00:00Z","delay":"1s"}`,
		`{"queue":"q","reason":"permanent_error","attributes":{"a":"b"},"since":"2020-01-01T00:00:00Z","rate":5,"limit":2,"wait":"5ms"}`,
		`{"reason":""}`, `{"older_than":"1h","statuses":["discarded","nope"]}`, `{"patch":"x"}`, `{"patch":[1]}`,
		`{"lease_token":"x","lines":[{"line":"a"},{"stream":"log","line":"b"},{"stream":"nope","line":""}]}`,
		`{"lease_token":"x","lines":null}`, `{"completions":[{"task_id":"t1","lease_token":"x"},{"task_id":"","lease_token":""}]}`, `{"lease_token":"","lines":[{}]}`,
		`{"queue":"q","kind":"k","idempotency_key":"d","unique_for":"1h"}`, `{"queue":"q","kind":"k","unique_for":"-1s"}`,
		`{"queue":"q","kind":"k","debounce":{"key":"d","for":"5s","max_wait":"1m"}}`, `{"queue":"q","kind":"k","debounce":{"key":"","for":0}}`,
		`{"runs":[{"workflow":"w"},{"workflow":"w","run_id":"r","input":{"a":1},"version":2,"trace":true}]}`, `{"runs":[{"run_id":"a.b"}]}`,
		`{"wait":-1}`, `{"max":1e999}`, `{"lease":9223372036854775807}`, "\x00", `{"a":` + string(bytes.Repeat([]byte("["), 5000)),
	} {
		f.Add(uint8(i), body)
	}
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		path := fuzzPaths[int(which)%len(fuzzPaths)]
		req := httptest.NewRequest("POST", path, bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		checkAnswer(t, rec, "POST "+path+" "+body)
	})
}

func FuzzListQuery(f *testing.F) {
	srv, _ := fuzzServer(f)
	for _, q := range []string{"queue=q&kind=k&state=pending,dead&attr=a=b&limit=10&after=t0",
		"limit=0", "limit=-1", "limit=99999999999999999999", "state=", "attr==", "attr=a", "attr=a=1&attr=a=2",
		"%zz", "queue=q&queue=r", "after=%00", "state=pending&state=nope", "attr=%20=x"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if q, err := url.ParseQuery(raw); err == nil {
			// The parser alone: an error is always a 4xx problem.
			if _, err := api.ParseListQuery(q); err != nil {
				if _, ok := err.(interface{ Error() string }); !ok {
					t.Fatal("odd error")
				}
			}
		}
		req := httptest.NewRequest("GET", "/v1/tasks", nil)
		req.URL.RawQuery = raw
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		checkAnswer(t, rec, "GET /v1/tasks?"+raw)
	})
}

func FuzzDLQQuery(f *testing.F) {
	srv, _ := fuzzServer(f)
	for _, q := range []string{"queue=q&kind=k&reason=permanent_error&status=open,resolved&error_contains=x&attr=a=b&since=24h&until=2030-01-01T00:00:00Z&limit=10&after=t0",
		"since=7d", "since=1d12h", "since=-1h", "since=99999999999d", "until=x", "status=", "status=nope", "reason=nope",
		"limit=0", "since=2030-01-01T00:00:00Z&until=2020-01-01T00:00:00Z", "attr=a", "queue=a&queue=b"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if q, err := url.ParseQuery(raw); err == nil {
			_, _ = api.ParseDLQQuery(q, time.Now(), 100)
		}
		for _, path := range []string{"/v1/dlq", "/v1/dlq/export"} {
			req := httptest.NewRequest("GET", path, nil)
			req.URL.RawQuery = raw
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			checkAnswer(t, rec, "GET "+path+"?"+raw)
		}
	})
}

func FuzzAuthorization(f *testing.F) {
	srv, sec := fuzzServer(f)
	for _, h := range []string{"Bearer " + sec, "Bearer bst_", "bearer " + sec, "Basic abc", "Bearer", " ", "Bearer bst_\x00",
		"Bearer " + sec + sec + sec + sec} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) {
		req := httptest.NewRequest("GET", "/v1/queues", nil)
		req.Header["Authorization"] = []string{h}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		checkAnswer(t, rec, "Authorization: "+h)
		if h != "" && rec.Code != http.StatusUnauthorized && rec.Code != http.StatusOK {
			t.Fatalf("Authorization %q: status %d", h, rec.Code)
		}
		if rec.Code == http.StatusOK && h != "" && h != "Bearer "+sec && h != "bearer "+sec {
			// Only the real secret (scheme case-insensitive) gets in; no
			// header at all is the anonymous admin of this (--dev) server.
			t.Fatalf("Authorization %q was accepted", h)
		}
	})
}

// FuzzReadQueries: the worker list, execution log and activity queries
// (and ?raw) answer a 4xx problem or 200, never a 5xx.
func FuzzReadQueries(f *testing.F) {
	srv, _ := fuzzServer(f)
	for _, q := range []string{"queue=q&state=active&limit=10&after=w", "state=bogus", "limit=0", "limit=x", "queue=bad queue!",
		"after=-1", "format=text", "format=xml", "after=99999999999999999999", "raw=true", "raw=maybe", "raw=1&raw=0", "color=red",
		"window=24h&queue=q&kind=k", "window=7d", "window=1h", "window=24h&minutes=5", "minutes=0", "queue=q"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if q, err := url.ParseQuery(raw); err == nil {
			_, _ = api.ParseWorkerQuery(q)
		}
		for _, path := range []string{"/v1/workers", "/v1/workers/w", "/v1/tasks/t1/executions/x/logs", "/v1/tasks/t1", "/v1/tasks", "/v1/activity"} {
			req := httptest.NewRequest("GET", path, nil)
			req.URL.RawQuery = raw
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			checkAnswer(t, rec, "GET "+path+"?"+raw)
		}
	})
}
