package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/bench"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/telemetry"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

func client(tb testing.TB, url string) *backstop.Client {
	return clientWith(tb, url, nil)
}

// clientWith opens url with the library config cfg (nil: defaults).
func clientWith(tb testing.TB, url string, cfg *backstop.Config) *backstop.Client {
	tb.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	c, err := backstop.NewClient(s, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// benchClient is a client with the telemetry `backstop bench` (and serve,
// work) runs with: metrics recorded by the SDK, no trace exporter, warnings
// logged (to nowhere here).
func benchClient(b *testing.B, url string) *backstop.Client {
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Service: "backstop-bench",
		LogOutput: io.Discard, LogLevel: slog.LevelWarn, Getenv: func(string) string { return "" }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return clientWith(b, url, &backstop.Config{Logger: tel.Logger, MeterProvider: tel.MeterProvider, TracerProvider: tel.TracerProvider})
}

// drainTasks is how many tasks each iteration inserts (untimed) and then
// works down (timed, up to the last completion written).
const drainTasks = 10_000

func benchmarkDrain(b *testing.B, url string) {
	c := benchClient(b, url)
	ctx := context.Background()
	var worked int
	var elapsed, cpu time.Duration
	var allocs uint64
	var ms runtime.MemStats
	for range b.N {
		b.StopTimer()
		q := bench.NewQueueName()
		if err := bench.Enqueue(ctx, c, q, drainTasks, 1000); err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&ms)
		mallocs, cpu0 := ms.Mallocs, bench.ProcessCPU()
		b.StartTimer()
		n, d, err := bench.Work(ctx, c, q, drainTasks, 100)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += bench.ProcessCPU() - cpu0
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - mallocs
		if err := bench.Verify(ctx, c, q, false); err != nil {
			b.Fatal(err)
		}
		worked += n
		elapsed += d
	}
	b.ReportMetric(float64(worked)/elapsed.Seconds(), "jobs/s")
	// Per drained task: heap allocations and this process's CPU (user and
	// system; on Postgres the server's CPU is not in it, on SQLite it is).
	b.ReportMetric(float64(allocs)/float64(worked), "allocs/task")
	b.ReportMetric(float64(cpu.Microseconds())/float64(worked), "cpu-µs/task")
}

func BenchmarkDrainSQLite(b *testing.B)   { benchmarkDrain(b, testdb.SQLite(b)) }
func BenchmarkDrainPostgres(b *testing.B) { benchmarkDrain(b, testdb.Postgres(b)) }

// BenchmarkEnqueuePostgres is the batch enqueue `backstop bench floor`
// times against COPY (EnqueueMany of 1,000 tasks, the bench's telemetry),
// with scripts/bench-table's three-field payload and without one. Per
// task: this process's CPU (the client's share; the server's is not in it)
// and heap allocations.
func BenchmarkEnqueuePostgres(b *testing.B) {
	for _, c := range []struct {
		name    string
		payload json.RawMessage
	}{{"empty", nil}, {"payload", json.RawMessage(`{"customer_id":"c-184467","order_id":90210,"amount":129.95}`)}} {
		b.Run(c.name, func(b *testing.B) {
			cl := benchClient(b, testdb.Postgres(b))
			ctx := context.Background()
			const batch = 1000
			q := bench.NewQueueName()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mallocs, cpu0 := ms.Mallocs, bench.ProcessCPU()
			n := 0
			for b.Loop() {
				if err := bench.EnqueuePayload(ctx, cl, q, batch, batch, c.payload); err != nil {
					b.Fatal(err)
				}
				n += batch
			}
			cpu := bench.ProcessCPU() - cpu0
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.Mallocs-mallocs)/float64(n), "allocs/task")
			b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/task")
		})
	}
}

func TestDrainVerifies(t *testing.T) {
	t.Parallel()
	c := client(t, testdb.SQLite(t))
	res, err := bench.Run(context.Background(), c, bench.Config{N: 500, Workers: 10, Batch: 100})
	if err != nil {
		t.Fatal(err)
	}
	if res.Worked != 500 || res.Elapsed <= 0 {
		t.Errorf("worked %d in %s, want 500 in a positive time", res.Worked, res.Elapsed)
	}
	// A task that is not succeeded fails verification.
	if _, err := c.Enqueue(context.Background(), backstop.EnqueueParams{Queue: res.Queue, Kind: "noop"}); err != nil {
		t.Fatal(err)
	}
	if err := bench.Verify(context.Background(), c, res.Queue, false); err == nil {
		t.Error("Verify passed with a pending task in the queue")
	}
	if err := bench.Verify(context.Background(), c, res.Queue, true); err != nil {
		t.Errorf("Verify with pendingOK: %v", err)
	}
}

// TestContinuousLeavesNothingRunning stops a worker while claims are in
// flight: every claimed task must be worked or released, never left running
// until its lease expires (a claim cut off by Stop used to lose its rows).
func TestContinuousLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := client(t, url(t))
			for range 3 {
				res, err := bench.Run(context.Background(), c, bench.Config{Duration: time.Second, Workers: 50, Batch: 200})
				if err != nil {
					t.Fatal(err)
				}
				if res.Worked == 0 {
					t.Fatal("worked no task")
				}
			}
		})
	}
}

// TestDrainFollowsEvents: with FollowEvents a subscriber of `all` delivers
// every event of the run (enqueued, claimed, started, succeeded per task),
// on both stores.
func TestDrainFollowsEvents(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := client(t, url(t))
			res, err := bench.Run(context.Background(), c, bench.Config{N: 300, Workers: 10, Batch: 100, FollowEvents: true})
			if err != nil {
				t.Fatal(err)
			}
			if f := res.Follow; f == nil || f.Succeeded != 300 || f.Events != 4*300 || f.Max < f.P50 {
				t.Fatalf("follow: %+v, want 300 succeeded of 1200 events", f)
			}
		})
	}
}

// slowEnqueues is a REAL store whose every Enqueue takes at least delay
// longer (a server whose commits are slow, as on a busy machine).
type slowEnqueues struct {
	store.Store
	delay time.Duration
	calls atomic.Int64
}

func (s *slowEnqueues) Enqueue(ctx context.Context, tasks []*bt.Task, opts store.EnqueueOpts) ([]store.EnqueueResult, error) {
	s.calls.Add(1)
	time.Sleep(s.delay)
	return s.Store.Enqueue(ctx, tasks, opts)
}

// TestLatencyHoldsTheRate: the latency producer keeps its schedule when
// each enqueue takes longer than the interval between two (a synchronous
// producer made 1/delay a second), and its concurrent single enqueues are
// written in fewer transactions than tasks (the client coalesces them).
func TestLatencyHoldsTheRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := dburl.Open(ctx, testdb.SQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	slow := &slowEnqueues{Store: s, delay: 20 * time.Millisecond} // at most 50 a second one at a time
	c, err := backstop.NewClient(slow, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := bench.Run(ctx, c, bench.Config{Rate: 200, Duration: 2 * time.Second, Workers: 50})
	if err != nil {
		t.Fatal(err)
	}
	rate := float64(res.Enqueued) / res.EnqueueElapsed.Seconds()
	if res.Enqueued != 400 || rate < 150 {
		t.Fatalf("enqueued %d at %.0f/s, want 400 at about 200/s", res.Enqueued, rate)
	}
	if n := slow.calls.Load(); n >= int64(res.Enqueued)/2 {
		t.Fatalf("%d transactions for %d single enqueues, want them coalesced", n, res.Enqueued)
	}
	if res.Worked != res.Enqueued || res.EnqueueP50 <= 0 {
		t.Fatalf("worked %d of %d, enqueue call p50 %s", res.Worked, res.Enqueued, res.EnqueueP50)
	}
}

// TestLatencyStages: the latency run takes each pickup apart (creation →
// the Enqueue call's return → the claim's start → the handler's start):
// with every enqueue's write held 20 ms, the enqueue stage's p50 is at
// least that, the slowest 1 % are counted by their largest stage, and
// BACKSTOP_BENCH_STAGES gets every task's stages.
func TestLatencyStages(t *testing.T) {
	ctx := context.Background()
	s, err := dburl.Open(ctx, testdb.SQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := backstop.NewClient(&slowEnqueues{Store: s, delay: 20 * time.Millisecond}, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	csvPath := filepath.Join(t.TempDir(), "stages.csv")
	t.Setenv("BACKSTOP_BENCH_STAGES", csvPath)
	var out bytes.Buffer
	res, err := bench.Run(ctx, c, bench.Config{Rate: 200, Duration: time.Second, Workers: 50, Progress: &out})
	if err != nil {
		t.Fatal(err)
	}
	var enq, largest int
	for line := range strings.Lines(out.String()) {
		var p50 float64
		if _, err := fmt.Sscanf(line, "bench: stage enqueue p50=%fms", &p50); err == nil {
			enq++
			if p50 < 20 {
				t.Errorf("enqueue stage p50 %.2f ms, want at least the 20 ms write: %s", p50, line)
			}
		}
		if i := strings.Index(line, "largest_in="); i >= 0 && strings.HasPrefix(line, "bench: slowest 1% (2)") {
			var n int
			fmt.Sscanf(line[i:], "largest_in=%d", &n)
			largest += n
		}
	}
	if enq != 1 || largest != 2 {
		t.Fatalf("stage lines: enqueue %d, slowest 1%% counted %d of 2:\n%s", enq, largest, out.String())
	}
	// The stage probe (BACKSTOP_BENCH_STAGES) takes claim_to_start apart.
	for _, part := range []string{"pick_wait", "acquire", "statement", "claim_rest", "handoff", "schedule", "to_handler"} {
		if !strings.Contains(out.String(), "bench: substage "+part+" p50=") {
			t.Errorf("no substage %s line:\n%s", part, out.String())
		}
	}
	if want := fmt.Sprintf("bench: claim_to_start split by the stage probe (%d of %d tasks)", res.Enqueued, res.Enqueued); !strings.Contains(out.String(), want) {
		t.Errorf("want %q: every task seen by the probe:\n%s", want, out.String())
	}
	raw, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(raw), "\n"); lines != res.Enqueued+2 {
		t.Fatalf("stages file: %d lines for %d tasks, want a line each, the start and the header", lines, res.Enqueued)
	}
}

// TestLatencyCanaryAndJSON: on Postgres a latency run measures the
// canary (a commit every 20 ms on a connection of its own) and prints its
// line beside the pickup's; its table is gone afterwards; the JSON form
// carries the latency figures, the stages and the canary's. On SQLite
// there is no canary (and no canary in the JSON); NoCanary turns it off.
func TestLatencyCanaryAndJSON(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := client(t, url(t))
			var out bytes.Buffer
			res, err := bench.Run(ctx, c, bench.Config{Rate: 100, Duration: 500 * time.Millisecond, Workers: 20, Progress: &out})
			if err != nil {
				t.Fatal(err)
			}
			line := strings.Contains(out.String(), "bench: canary commit p50=")
			raw, err := json.Marshal(res.JSON())
			if err != nil {
				t.Fatal(err)
			}
			var j map[string]any
			if err := json.Unmarshal(raw, &j); err != nil {
				t.Fatal(err)
			}
			lat, _ := j["latency"].(map[string]any)
			stages, _ := lat["stages"].(map[string]any)
			if j["mode"] != "latency" || j["worked"] != float64(res.Worked) || lat["p99_ms"] == nil || lat["samples"] != float64(res.Samples) ||
				stages["claim_to_start"] == nil || j["go_runtime"] == nil {
				t.Fatalf("JSON %s: want the mode, worked, the latency with its stages, the Go runtime's figures", raw)
			}
			if name == "sqlite" {
				if res.Canary != nil || line || j["canary"] != nil {
					t.Fatalf("a canary on SQLite: %+v, line %t, JSON %s", res.Canary, line, raw)
				}
				return
			}
			k, _ := j["canary"].(map[string]any)
			if res.Canary == nil || res.Canary.Commits < 5 || res.Canary.P50 <= 0 || res.Canary.P99 < res.Canary.P50 || !line ||
				k["commits"] != float64(res.Canary.Commits) || k["p99_ms"] == nil {
				t.Fatalf("canary %+v, line %t, JSON %s: want a few commits, their p50 <= p99, printed and in the JSON:\n%s", res.Canary, line, raw, out.String())
			}
			pool := c.Store().(interface{ Pool() *pgxpool.Pool }).Pool()
			var left int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'bench_canary_%' AND schemaname = current_schema()`).Scan(&left); err != nil || left != 0 {
				t.Fatalf("canary tables left: %d, %v", left, err)
			}
			res, err = bench.Run(ctx, c, bench.Config{Rate: 100, Duration: 200 * time.Millisecond, Workers: 20, NoCanary: true})
			if err != nil || res.Canary != nil {
				t.Fatalf("NoCanary: canary %+v, %v", res.Canary, err)
			}
		})
	}
}
