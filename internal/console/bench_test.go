package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// BenchmarkConsolePages measures each console page's server time: the API
// calls the page makes when it opens (the same paths, in the same order;
// sequentially, so calls the page makes in parallel count in full), over
// real HTTP on loopback, with 100,000 pending tasks and 100,000 dead letters
// in the store (BACKSTOP_BENCH_TASKS changes the size). It reports the
// median and the 95th percentile of a page's time (ms); docs/benchmarks.md
// has the figures and the command:
//
//	scripts/with-postgres go test -run '^$' -bench ConsolePages -benchtime 50x ./internal/console/
func BenchmarkConsolePages(b *testing.B) {
	n := 100_000
	if v := os.Getenv("BACKSTOP_BENCH_TASKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("BACKSTOP_BENCH_TASKS=%q: want a number of at least 1000", v)
		}
	}
	for _, st := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		b.Run(st.name, func(b *testing.B) {
			e := newEnv(b, st.url(b), envOpts{})
			seed := seedConsole(b, e, n)
			for _, p := range consolePages(seed) {
				b.Run(p.name, func(b *testing.B) {
					c := &http.Client{}
					times := make([]time.Duration, 0, b.N)
					perCall := map[string][]time.Duration{}
					for b.Loop() {
						start := time.Now()
						for _, path := range p.calls(e, c, b) {
							t0 := time.Now()
							benchGet(b, e, c, path)
							perCall[path] = append(perCall[path], time.Since(t0))
						}
						times = append(times, time.Since(start))
					}
					slices.Sort(times)
					ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
					for path, ts := range perCall {
						slices.Sort(ts)
						b.Logf("%s: median %.2f ms", path, ms(ts[len(ts)/2]))
					}
					b.ReportMetric(ms(times[len(times)/2]), "median-ms")
					b.ReportMetric(ms(times[len(times)*95/100]), "p95-ms")
					b.ReportMetric(float64(len(p.calls(e, c, b))), "calls")
				})
			}
		})
	}
}

// consoleSeed names what the pages open.
type consoleSeed struct {
	queues     []string
	deadID     string // a dead letter in the middle
	execID     string // its attempt
	workerID   string
	errorWord  string // in a tenth of the dead letters' errors
	taskCursor string // the id after which the tasks list's second page starts
}

type consolePage struct {
	name string
	// calls: the GETs the page makes as it opens (some depend on earlier
	// answers, as in the page: computed per open).
	calls func(e *env, c *http.Client, b *testing.B) []string
}

// endCall is what the router asks before every page (lib.endCursor).
const endCall = "/v1/events?after=end&limit=1"

func consolePages(s consoleSeed) []consolePage {
	fixed := func(paths ...string) func(*env, *http.Client, *testing.B) []string {
		return func(*env, *http.Client, *testing.B) []string { return append([]string{endCall}, paths...) }
	}
	return []consolePage{
		// /v1/queues (counts and oldest pending), /v1/workers and the charts' /v1/activity (overview.js).
		{"overview", fixed("/v1/queues", "/v1/workers?limit=1000", "/v1/activity?minutes=60")},
		// The list and its grouped counts (dlq.js).
		{"dlq", fixed("/v1/dlq?status=open&limit=50", "/v1/dlq/groups?status=open")},
		{"dlq-filtered", fixed("/v1/dlq?queue="+s.queues[3]+"&error_contains="+url.QueryEscape(s.errorWord)+"&status=open&limit=50",
			"/v1/dlq/groups?queue="+s.queues[3]+"&error_contains="+url.QueryEscape(s.errorWord)+"&status=open")},
		{"dlq-item", fixed("/v1/dlq/" + url.PathEscape(s.deadID))},
		{"tasks", fixed("/v1/tasks?limit=50")},
		{"tasks-page2", fixed("/v1/tasks?limit=50&after=" + url.QueryEscape(s.taskCursor))},
		{"tasks-filtered", fixed("/v1/tasks?queue=" + s.queues[5] + "&state=pending&limit=50")},
		{"tasks-error", fixed("/v1/tasks?error_contains=" + url.QueryEscape(s.errorWord) + "&limit=50")},
		{"tasks-key", fixed("/v1/tasks?idempotency_key=order-7&limit=50")},
		// A run of 2,000 tasks (1,000 dead): its summary and first page (runs.js).
		{"run", fixed("/v1/runs/run-7", "/v1/runs/run-7/tasks?limit=50")},
		{"task", fixed("/v1/tasks/"+url.PathEscape(s.deadID),
			"/v1/tasks/"+url.PathEscape(s.deadID)+"/executions/"+url.PathEscape(s.execID)+"/logs?limit=200")},
		{"workers", fixed("/v1/workers?limit=50")},
		{"workers-label", fixed("/v1/workers?label=team%3Dbench&limit=50")},
		{"worker", fixed("/v1/workers/" + url.PathEscape(s.workerID))},
		{"events", fixed("/v1/events?stream=all&limit=1", "/v1/events?stream=all")},
	}
}

// benchGet GETs path as the viewer and reads the whole answer.
func benchGet(b *testing.B, e *env, c *http.Client, path string) []byte {
	req, err := http.NewRequest("GET", e.url+path, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.secret[api.RoleViewer])
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d %v %.300s", path, resp.StatusCode, err, body)
	}
	return body
}

// seedConsole writes n dead letters (enqueued, claimed and settled dead in
// the store's batches of 5,000, their deaths spread over the last hour),
// then n pending tasks (enqueued in batches
// of 5,000), over ten queues, five kinds and 200 customers (an attribute),
// with ten error texts and two reasons; and registers a worker.
func seedConsole(b *testing.B, e *env, n int) consoleSeed {
	ctx := context.Background()
	s := e.store
	seed := consoleSeed{workerID: "bench-worker", errorWord: "timeout"}
	for i := range 10 {
		seed.queues = append(seed.queues, fmt.Sprintf("queue-%d", i))
	}
	errs := []string{"connection refused", "timeout after 30s", "card declined", "invalid address", "rate limited by upstream",
		"schema mismatch", "no such customer", "upstream 503", "disk full", "permission denied"}
	now := time.Now().UTC().Truncate(time.Microsecond)
	start := time.Now()
	const chunk = 5000
	// Dead letters first: while a chunk is claimed, it is all there is to claim.
	for _, prefix := range []string{"dead", "task"} {
		for from := 0; from < n; from += chunk {
			tasks := make([]*bt.Task, 0, chunk)
			for i := from; i < min(from+chunk, n); i++ {
				tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("%s-%07d", prefix, i), Queue: seed.queues[i%10],
					Kind: fmt.Sprintf("kind-%d", i%5), State: bt.StatePending, MaxAttempts: 1,
					Payload:    json.RawMessage(`{"order":` + strconv.Itoa(i) + `,"note":"a payload of a usual size, with some text in it"}`),
					Attributes: map[string]string{"customer": fmt.Sprintf("c%d", i%200), "run_id": fmt.Sprintf("run-%d", i%100)},
					RunAt:      now, CreatedAt: now, UpdatedAt: now})
			}
			if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
				b.Fatal(err)
			}
			if prefix != "dead" {
				continue
			}
			for _, q := range seed.queues {
				got, err := s.Claim(ctx, store.ClaimParams{Queue: q, WorkerID: seed.workerID, Max: chunk, Now: now, Lease: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				ss := make([]store.Settlement, len(got))
				for i, t := range got {
					k, _ := strconv.Atoi(t.ID[len("dead-"):])
					reason := bt.ReasonPermanentError
					if k%3 == 0 {
						reason = bt.ReasonAttemptsExhausted
					}
					// The deaths spread over the last hour, as an hour of
					// failures would (the overview's charts read them by minute).
					at := now.Add(-time.Hour + time.Duration(k)*time.Hour/time.Duration(n))
					ss[i] = store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, Outcome: bt.OutcomePermanentError,
						Error: errs[k%len(errs)], FinishedAt: at, State: bt.StateDead, DeadReason: reason}
				}
				if _, err := s.Settle(ctx, ss); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	seed.deadID = fmt.Sprintf("dead-%07d", n/2)
	t, err := e.lib.Get(ctx, seed.deadID)
	if err != nil || t.State != bt.StateDead {
		b.Fatalf("seed: %s: %v %+v", seed.deadID, err, t)
	}
	seed.execID = t.ExecutionID
	seed.taskCursor = fmt.Sprintf("task-%07d", n/2)
	c := &http.Client{}
	req, _ := http.NewRequest("POST", e.url+"/v1/workers", strings.NewReader(`{"id":"`+seed.workerID+`","host":"bench","pid":1,"queues":["queue-0"],"version":"bench"}`))
	req.Header.Set("Authorization", "Bearer "+e.secret[api.RoleOperator])
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		b.Fatalf("register the worker: %d", resp.StatusCode)
	}
	b.Logf("seeded %d dead letters and %d pending tasks in %v", n, n, time.Since(start).Round(time.Millisecond))
	return seed
}
