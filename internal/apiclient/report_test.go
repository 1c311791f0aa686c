package apiclient_test

// The reliable reports against a real API server on a real SQLite file, on
// loopback, behind a front that can answer 429/503 itself, or pass a
// request through and then cut the connection (the report lands, its answer
// is lost), as a restarting server or an overloaded proxy does.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
)

// action is what the front does with one request.
type action int

const (
	pass    action = iota
	limited        // 429 with Retry-After: 1
	unavail        // 503 without Retry-After
	lost           // pass it to the server, then cut the connection
)

// front sits before the real server; rule picks each request's action.
type front struct {
	next http.Handler
	mu   sync.Mutex
	rule func(r *http.Request, n int) action // n: 1-based count of requests to this path
	seen map[string][]time.Time              // arrival times by "METHOD path"
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Method + " " + r.URL.Path
	f.mu.Lock()
	f.seen[key] = append(f.seen[key], time.Now())
	n := len(f.seen[key])
	rule := f.rule
	f.mu.Unlock()
	a := pass
	if rule != nil {
		a = rule(r, n)
	}
	switch a {
	case limited:
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"type":"urn:backstop:problem:rate_limited","title":"Too many requests for this token","status":429,"code":"rate_limited"}`))
	case unavail:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("<html>upstream restarting</html>"))
	case lost:
		rec := httptest.NewRecorder()
		f.next.ServeHTTP(rec, r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	default:
		f.next.ServeHTTP(w, r)
	}
}

func (f *front) times(key string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.seen[key]...)
}

func (f *front) setRule(rule func(r *http.Request, n int) action) {
	f.mu.Lock()
	f.rule = rule
	f.mu.Unlock()
}

type env struct {
	f   *front
	cl  *apiclient.Client
	lib *backstop.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, testdb.SQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	lib, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Client: lib, Logger: slog.New(slog.DiscardHandler), AnonymousAdmin: true, RateLimit: -1})
	if err != nil {
		t.Fatal(err)
	}
	f := &front{next: srv, seen: map[string][]time.Time{}}
	ts := httptest.NewServer(f)
	t.Cleanup(func() { ts.Close(); srv.Close() })
	return &env{f: f, cl: apiclient.New(ts.URL, ""), lib: lib}
}

// claim enqueues one task (retried at once after a failure, up to
// maxAttempts) and claims it.
func (e *env) claim(t *testing.T, maxAttempts int) apiclient.Lease {
	t.Helper()
	ctx := context.Background()
	if _, err := e.cl.Enqueue(ctx, apiclient.Task{Queue: "q", Kind: "k", MaxAttempts: maxAttempts,
		Retry: &bt.RetryPolicy{Schedule: []bt.Duration{0}}}); err != nil {
		t.Fatal(err)
	}
	return e.claimNext(t)
}

func (e *env) claimNext(t *testing.T) apiclient.Lease {
	t.Helper()
	ts, err := e.cl.Claim(context.Background(), api.ClaimRequest{Queues: []string{"q"}, WorkerID: "w1", Max: 1, Wait: bt.Duration(5 * time.Second)})
	if err != nil || len(ts) != 1 {
		t.Fatalf("claim: %v %v", ts, err)
	}
	return apiclient.LeaseOf(ts[0])
}

func (e *env) task(t *testing.T, id string) *backstop.Task {
	t.Helper()
	task, err := e.lib.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// fast is a backoff far shorter than the front's Retry-After.
func fast(waits *[]time.Duration) *apiclient.Retry {
	return &apiclient.Retry{Base: time.Millisecond, Max: 2 * time.Millisecond,
		OnRetry: func(_ int, _ error, wait time.Duration) { *waits = append(*waits, wait) }}
}

// TestReportHonoursRetryAfter: a report refused with 429 and Retry-After: 1
// is sent again, not before a second has passed, and lands.
func TestReportHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.claim(t, 1)
	path := "/v1/tasks/" + l.TaskID + "/complete"
	e.f.setRule(func(r *http.Request, n int) action {
		if r.URL.Path == path && n == 1 {
			return limited
		}
		return pass
	})
	var waits []time.Duration
	rep, err := e.cl.ReportComplete(context.Background(), l, api.CompleteRequest{}, fast(&waits))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tries != 2 || rep.Confirmed || rep.State != bt.StateSucceeded {
		t.Fatalf("report: %+v %+v", rep, rep.SettleResponse)
	}
	if len(waits) != 1 || waits[0] < time.Second {
		t.Fatalf("waits before retrying: %v, want one of at least the server's Retry-After (1s)", waits)
	}
	at := e.f.times("POST " + path)
	if len(at) != 2 || at[1].Sub(at[0]) < time.Second {
		t.Fatalf("complete requests at %v: the retry came before Retry-After", at)
	}
	if task := e.task(t, l.TaskID); task.State != bt.StateSucceeded {
		t.Fatalf("task %s", task.State)
	}
}

// TestReportConfirmsALandedReport: the first try lands but its answer is
// lost (the connection is cut); the retry gets 409, and the task's history
// shows this lease's attempt settled as reported: the report is done, not
// lost. Same for a failure report.
func TestReportConfirmsALandedReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.f.setRule(func(r *http.Request, n int) action {
		if strings.HasSuffix(r.URL.Path, "/complete") || strings.HasSuffix(r.URL.Path, "/fail") {
			if n == 1 {
				return lost
			}
		}
		return pass
	})
	var waits []time.Duration
	l := e.claim(t, 1)
	rep, err := e.cl.ReportComplete(context.Background(), l, api.CompleteRequest{}, fast(&waits))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Confirmed || rep.Tries != 2 || rep.State != bt.StateSucceeded || rep.Outcome != bt.OutcomeSucceeded {
		t.Fatalf("complete: %+v %+v", rep, rep.SettleResponse)
	}
	if task := e.task(t, l.TaskID); task.State != bt.StateSucceeded || len(task.Executions) != 1 {
		t.Fatalf("task %s after %d executions", task.State, len(task.Executions))
	}

	l = e.claim(t, 1)
	rep, err = e.cl.ReportFail(context.Background(), l, api.FailRequest{Outcome: bt.OutcomePermanentError, Error: "bad input"}, fast(&waits))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Confirmed || rep.State != bt.StateDead || rep.Outcome != bt.OutcomePermanentError {
		t.Fatalf("fail: %+v %+v", rep, rep.SettleResponse)
	}
}

// TestReportGivesUpOnLostLease: a report for a lease that was settled
// otherwise (here the attempt was reported failed and the task claimed
// again) gets 409 and is given up at once as ErrLeaseLost, with no retry;
// the current lease's report still lands. A report for a task that does
// not exist (404) is lost too.
func TestReportGivesUpOnLostLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	old := e.claim(t, 3)
	if _, err := e.cl.Fail(ctx, old.TaskID, api.FailRequest{LeaseToken: old.Token, Outcome: bt.OutcomeTransientError}); err != nil {
		t.Fatal(err)
	}
	cur := e.claimNext(t)
	if cur.TaskID != old.TaskID || cur.Attempt != 2 {
		t.Fatalf("second claim: %+v", cur)
	}
	var waits []time.Duration
	_, err := e.cl.ReportComplete(ctx, old, api.CompleteRequest{}, fast(&waits))
	if !errors.Is(err, apiclient.ErrLeaseLost) || apiclient.StatusOf(err) != http.StatusConflict {
		t.Fatalf("report on a lost lease: %v", err)
	}
	if len(waits) != 0 || len(e.f.times("POST /v1/tasks/"+old.TaskID+"/complete")) != 1 {
		t.Fatalf("a lost lease's report was retried: waits %v", waits)
	}
	if rep, err := e.cl.ReportComplete(ctx, cur, api.CompleteRequest{}, fast(&waits)); err != nil || rep.Confirmed || rep.State != bt.StateSucceeded {
		t.Fatalf("the current lease's report: %+v %v", rep, err)
	}

	gone := apiclient.Lease{TaskID: "no-such-task", Token: "whatever", Attempt: 1}
	if _, err := e.cl.ReportComplete(ctx, gone, api.CompleteRequest{}, fast(&waits)); !errors.Is(err, apiclient.ErrLeaseLost) || apiclient.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("report for a missing task: %v", err)
	}
}

// TestReportRetriesUntilCtxEnds: a server that keeps answering 503 is tried
// again and again, until the caller's ctx ends (a lease that could not be
// kept); the error says why it gave up and what the last answer was.
func TestReportRetriesUntilCtxEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.claim(t, 1)
	e.f.setRule(func(r *http.Request, n int) action {
		if strings.HasSuffix(r.URL.Path, "/complete") {
			return unavail
		}
		return pass
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	expired := errors.New("the lease expired")
	r := &apiclient.Retry{Base: time.Millisecond, Max: 2 * time.Millisecond, OnRetry: func(try int, _ error, _ time.Duration) {
		if try == 5 {
			cancel(expired)
		}
	}}
	_, err := e.cl.ReportComplete(ctx, l, api.CompleteRequest{}, r)
	if !errors.Is(err, expired) || apiclient.StatusOf(err) != http.StatusServiceUnavailable || errors.Is(err, apiclient.ErrLeaseLost) {
		t.Fatalf("report against a 503 server: %v", err)
	}
	if n := len(e.f.times("POST /v1/tasks/" + l.TaskID + "/complete")); n != 5 {
		t.Fatalf("%d tries, want 5", n)
	}
	e.f.setRule(nil)
	if rep, err := e.cl.ReportComplete(context.Background(), l, api.CompleteRequest{}, r); err != nil || rep.State != bt.StateSucceeded {
		t.Fatalf("once the server answers: %+v %v", rep, err)
	}
}

// TestReportRetriesRefusedConnections: no server at all for a while (a
// restart) is retried like a 503.
func TestReportRetriesRefusedConnections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.claim(t, 1)
	dead := httptest.NewServer(http.NotFoundHandler())
	base := dead.URL
	dead.Close() // nothing listens there now
	cl := apiclient.New(base, "")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	tries := 0
	r := &apiclient.Retry{Base: time.Millisecond, Max: 2 * time.Millisecond, OnRetry: func(try int, _ error, _ time.Duration) {
		tries = try
		if try == 3 {
			// The server is back (at the real address).
			cl.BaseURL = e.cl.BaseURL
		}
	}}
	rep, err := cl.ReportComplete(ctx, l, api.CompleteRequest{}, r)
	if err != nil || rep.Tries != 4 || tries != 3 || rep.State != bt.StateSucceeded {
		t.Fatalf("report across refused connections: %+v %v (tries %d)", rep, err, tries)
	}
}

// TestBackoffBounds: the n-th wait is Base·2ⁿ capped at Max, jittered to
// between half and all of it.
func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	r := &apiclient.Retry{Base: 100 * time.Millisecond, Max: time.Second}
	for try, want := range []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} {
		want *= time.Millisecond
		for range 200 {
			if d := r.Backoff(try); d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", try, d, want/2, want)
			}
		}
	}
	if d := (*apiclient.Retry)(nil).Backoff(100); d < 2500*time.Millisecond || d > 5*time.Second {
		t.Fatalf("default cap: %s", d)
	}
}

// TestRetryAfterIsSurfaced: the client puts a 429's Retry-After on the
// problem it returns, and a non-problem answer's on a StatusError.
func TestRetryAfterIsSurfaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.f.setRule(func(r *http.Request, n int) action {
		switch r.URL.Path {
		case "/v1/queues":
			return limited
		case "/healthz":
			return unavail
		}
		return pass
	})
	_, err := e.cl.Queues(context.Background())
	var p *api.Problem
	if !errors.As(err, &p) || p.Status != 429 || p.RetryAfter != time.Second {
		t.Fatalf("429: %#v", err)
	}
	if ok, after := apiclient.Retryable(err); !ok || after != time.Second {
		t.Fatalf("Retryable(429) = %v %s", ok, after)
	}
	err = e.cl.Do(context.Background(), "GET", "/healthz", nil, nil)
	var se *apiclient.StatusError
	if !errors.As(err, &se) || se.Status != 503 || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("503: %#v", err)
	}
	for _, code := range []int{400, 401, 403, 404, 409, 413, 422} {
		if ok, _ := apiclient.Retryable(&api.Problem{Status: code}); ok {
			t.Errorf("HTTP %d is retryable", code)
		}
	}
}

// TestReportCompleteMany: the batch complete's first answer is lost; the
// retry finds both leases already settled by it (confirmed from the
// history), while a lease settled otherwise is reported lost.
func TestReportCompleteMany(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.claim(t, 1), e.claim(t, 1)
	c := e.claim(t, 1)
	if _, err := e.cl.Fail(ctx, c.TaskID, api.FailRequest{LeaseToken: c.Token, Outcome: bt.OutcomePermanentError}); err != nil {
		t.Fatal(err)
	}
	e.f.setRule(func(r *http.Request, n int) action {
		if r.URL.Path == "/v1/tasks/complete" && n == 1 {
			return lost
		}
		return pass
	})
	var waits []time.Duration
	res, err := e.cl.ReportCompleteMany(ctx, []apiclient.Completion{{Lease: a}, {Lease: b}, {Lease: c}}, fast(&waits))
	if err != nil || len(res) != 3 {
		t.Fatalf("batch: %v %v", res, err)
	}
	for i, l := range []apiclient.Lease{a, b} {
		if r := res[i]; r.Err != nil || r.TaskID != l.TaskID || !r.Report.Confirmed || r.Report.State != bt.StateSucceeded {
			t.Errorf("item %d: %+v", i, r)
		}
	}
	if r := res[2]; !errors.Is(r.Err, apiclient.ErrLeaseLost) || r.Report != nil {
		t.Errorf("the lease settled otherwise: %+v", r)
	}
	if len(waits) != 1 {
		t.Errorf("waits %v: want one retry of the batch", waits)
	}
}
