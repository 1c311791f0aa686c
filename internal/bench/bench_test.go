package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/bench"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
)

func client(tb testing.TB, url string) *backstop.Client {
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
	c, err := backstop.NewClient(s, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// drainTasks is how many tasks each iteration inserts (untimed) and then
// works down (timed, up to the last completion written).
const drainTasks = 10_000

func benchmarkDrain(b *testing.B, url string) {
	c := client(b, url)
	ctx := context.Background()
	var worked int
	var elapsed time.Duration
	for range b.N {
		b.StopTimer()
		q := bench.NewQueueName()
		if err := bench.Enqueue(ctx, c, q, drainTasks, 1000); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		n, d, err := bench.Work(ctx, c, q, drainTasks, 100)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := bench.Verify(ctx, c, q, false); err != nil {
			b.Fatal(err)
		}
		worked += n
		elapsed += d
	}
	b.ReportMetric(float64(worked)/elapsed.Seconds(), "jobs/s")
}

func BenchmarkDrainSQLite(b *testing.B)   { benchmarkDrain(b, testdb.SQLite(b)) }
func BenchmarkDrainPostgres(b *testing.B) { benchmarkDrain(b, testdb.Postgres(b)) }

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
