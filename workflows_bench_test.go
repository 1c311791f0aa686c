package backstop

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// BenchmarkWorkflowOverhead: the cost of orchestration. Each iteration
// completes 100 runs of a 5-step linear workflow (500 step tasks, each
// enqueued in the transaction that settles its predecessor), or, in the
// "plain" case, 500 independent tasks of the same no-op handler, with one
// in-process worker (concurrency 8) on each store. runs/s and tasks/s are
// reported; the "batch" case starts the 100 runs with one RunWorkflows
// (BenchmarkWorkflowOverheadPairs' batch round, here alone, so a
// server's statement counts can be read per mode); docs/benchmarks.md
// has the figures and the command:
//
//	scripts/with-postgres go test -run '^$' -bench WorkflowOverhead -benchtime 3x -count 5 .
func BenchmarkWorkflowOverhead(b *testing.B) {
	const runs, steps = 100, 5
	for _, db := range benchDBs {
		for _, mode := range []string{"workflow", "batch", "plain"} {
			b.Run(db.name+"/"+mode, func(b *testing.B) {
				round := overheadRig(b, db.url(b), runs, steps)
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					round(mode)
				}
				el := time.Since(start).Seconds()
				b.ReportMetric(float64(b.N*runs*steps)/el, "tasks/s")
				if mode != "plain" {
					b.ReportMetric(float64(b.N*runs)/el, "runs/s")
				}
			})
		}
	}
}

// BenchmarkWorkflowOverheadPairs: BenchmarkWorkflowOverhead's two modes
// measured as pairs, what the workflow row of scripts/bench-table reads,
// with a third mode, the batch start, that the workflow-batch row reads.
// One store and one worker (concurrency 8) serve every mode, on the same
// queue and tables; after one untimed round of each (the pool's
// connections, their prepared statements and plans), each iteration is a
// round of each mode, the workflow and batch rounds on either side of the
// plain round, which side alternating: 100 runs of the 5-step linear
// workflow started one after another ("workflow"), 100 runs started with
// one RunWorkflows ("batch"), or 500 tasks enqueued with one EnqueueMany
// ("plain"), each round timed until its 500 handlers ran. The rounds are
// what BenchmarkWorkflowOverhead times; here a pair's two are seconds
// apart in one process and on one warm store, where that benchmark times
// 3 rounds of one mode, then 3 of the other, each on a fresh store
// (docs/benchmarks.md, branch wfstep5: its ratio swung 0.62–0.86 on a
// quiet box). Reported: step/plain, the median over the iterations of
// (step tasks/s) / (plain tasks/s), and batch/plain, the same for the
// batch round against the same plain round; each mode's tasks/s over all
// its rounds.
//
//	scripts/with-postgres go test -run '^$' -bench WorkflowOverheadPairs/postgres -benchtime 10x .
func BenchmarkWorkflowOverheadPairs(b *testing.B) {
	const runs, steps = 100, 5
	for _, db := range benchDBs {
		b.Run(db.name, func(b *testing.B) {
			round := overheadRig(b, db.url(b), runs, steps)
			round("workflow")
			round("plain")
			round("batch")
			b.ResetTimer()
			var stepRatios, batchRatios []float64
			var stepT, plainT, batchT time.Duration
			for i := 0; i < b.N; i++ {
				var st, pl, ba time.Duration
				if i%2 == 0 {
					st = round("workflow")
					pl = round("plain")
					ba = round("batch")
				} else {
					ba = round("batch")
					pl = round("plain")
					st = round("workflow")
				}
				stepT, plainT, batchT = stepT+st, plainT+pl, batchT+ba
				stepRatios = append(stepRatios, pl.Seconds()/st.Seconds()) // (500/st) / (500/pl)
				batchRatios = append(batchRatios, pl.Seconds()/ba.Seconds())
			}
			b.ReportMetric(median(stepRatios), "step/plain")
			b.ReportMetric(median(batchRatios), "batch/plain")
			b.ReportMetric(float64(b.N*runs*steps)/stepT.Seconds(), "step_tasks/s")
			b.ReportMetric(float64(b.N*runs*steps)/plainT.Seconds(), "plain_tasks/s")
			b.ReportMetric(float64(b.N*runs*steps)/batchT.Seconds(), "batch_tasks/s")
		})
	}
}

// median is the median of xs (sorted in place).
func median(xs []float64) float64 {
	slices.Sort(xs)
	med := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		med = (xs[len(xs)/2-1] + med) / 2
	}
	return med
}

// overheadRig makes the workflow overhead benchmarks' store (the 5-step
// linear workflow registered) and worker (concurrency 8 on queue bench),
// and answers a round of a mode: "workflow" starts runs runs one after
// another, "batch" starts them with one RunWorkflows, "plain" enqueues
// runs*steps tasks with one EnqueueMany; a round is timed until its
// runs*steps handlers ran.
func overheadRig(b *testing.B, url string, runs, steps int) (round func(mode string) time.Duration) {
	ctx := context.Background()
	_, c := benchStore(b, url)
	applyLinear(b, c, steps)
	done := make(chan struct{}, runs*steps)
	w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"bench": 8}, PollInterval: 5 * time.Millisecond,
		MaintenanceInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	w.Handle("noop", HandlerFunc(func(context.Context, *Task) error { done <- struct{}{}; return nil }))
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Stop(ctx) })
	return func(mode string) time.Duration {
		start := time.Now()
		switch mode {
		case "workflow":
			for r := 0; r < runs; r++ {
				if _, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "linear"}); err != nil {
					b.Fatal(err)
				}
			}
		case "batch":
			ps := make([]RunWorkflowParams, runs)
			for j := range ps {
				ps[j] = RunWorkflowParams{Workflow: "linear"}
			}
			if _, err := c.RunWorkflows(ctx, ps); err != nil {
				b.Fatal(err)
			}
		default:
			ps := make([]EnqueueParams, runs*steps)
			for j := range ps {
				ps[j] = EnqueueParams{Queue: "bench", Kind: "noop"}
			}
			if _, err := c.EnqueueMany(ctx, ps); err != nil {
				b.Fatal(err)
			}
		}
		for j := 0; j < runs*steps; j++ {
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				b.Fatalf("%s: only %d of %d tasks ran", mode, j, runs*steps)
			}
		}
		return time.Since(start)
	}
}

// BenchmarkWorkflowStart: the start path alone, without a worker: 100
// runs of a 5-step linear workflow started one after another (each writes
// its run row, its step rows, its first task and its events). ms/start and
// the process's CPU a start (client_cpu_ms/start, getrusage) are reported:
//
//	scripts/with-postgres go test -run '^$' -bench WorkflowStart -benchtime 3x -count 5 .
func BenchmarkWorkflowStart(b *testing.B) {
	const runs, steps = 100, 5
	for _, db := range benchDBs {
		b.Run(db.name, func(b *testing.B) {
			ctx := context.Background()
			_, c := benchStore(b, db.url(b))
			applyLinear(b, c, steps)
			b.ResetTimer()
			start, cpu := time.Now(), drainSplitCPU()
			for i := 0; i < b.N; i++ {
				for r := 0; r < runs; r++ {
					if _, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "linear"}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N*runs), "ms/start")
			b.ReportMetric(float64((drainSplitCPU()-cpu).Microseconds())/1000/float64(b.N*runs), "client_cpu_ms/start")
		})
	}
}

// BenchmarkWorkflowStartBatch: BenchmarkWorkflowStart's 100 runs started
// with one RunWorkflows (one transaction) instead of one after another.
// ms/start and client_cpu_ms/start (a run's share of the batch) are
// reported:
//
//	scripts/with-postgres go test -run '^$' -bench WorkflowStartBatch -benchtime 20x -count 5 .
func BenchmarkWorkflowStartBatch(b *testing.B) {
	const runs, steps = 100, 5
	for _, db := range benchDBs {
		b.Run(db.name, func(b *testing.B) {
			ctx := context.Background()
			_, c := benchStore(b, db.url(b))
			applyLinear(b, c, steps)
			ps := make([]RunWorkflowParams, runs)
			for j := range ps {
				ps[j] = RunWorkflowParams{Workflow: "linear"}
			}
			b.ResetTimer()
			start, cpu := time.Now(), drainSplitCPU()
			for i := 0; i < b.N; i++ {
				if _, err := c.RunWorkflows(ctx, ps); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N*runs), "ms/start")
			b.ReportMetric(float64((drainSplitCPU()-cpu).Microseconds())/1000/float64(b.N*runs), "client_cpu_ms/start")
		})
	}
}

// BenchmarkWorkflowSettleBatch: one settle transaction that completes the
// first step of 100 runs of a 2-step workflow (so it enqueues 100 second
// steps): the cost of advancing many runs in one settle batch, without a
// worker's scheduling in the measure. ms/batch is reported:
//
//	scripts/with-postgres go test -run '^$' -bench WorkflowSettleBatch -benchtime 20x -count 5 .
func BenchmarkWorkflowSettleBatch(b *testing.B) {
	const runs = 100
	for _, db := range benchDBs {
		b.Run(db.name, func(b *testing.B) {
			ctx := context.Background()
			s, c := benchStore(b, db.url(b))
			bld := workflow.New("pair").Queue("settle-bench")
			bld.Step("first", "noop")
			bld.Step("second", "noop").Needs("first")
			def, err := bld.Build()
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := c.ApplyWorkflow(ctx, def); err != nil {
				b.Fatal(err)
			}
			var total time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for r := 0; r < runs; r++ {
					if _, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "pair"}); err != nil {
						b.Fatal(err)
					}
				}
				now := time.Now()
				got, err := s.Claim(ctx, store.ClaimParams{Queue: "settle-bench", WorkerID: "bench", Max: runs, Now: now, Lease: time.Minute})
				if err != nil || len(got) != runs {
					b.Fatalf("claim: %d %v", len(got), err)
				}
				ss := make([]store.Settlement, len(got))
				for j, t := range got {
					ss[j] = store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, Outcome: OutcomeSucceeded,
						FinishedAt: now, State: StateSucceeded}
				}
				b.StartTimer()
				start := time.Now()
				if _, err := c.e.Settle(ctx, ss); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				b.StopTimer()
				// The second steps: out of the way of the next claim.
				if _, err := s.Claim(ctx, store.ClaimParams{Queue: "settle-bench", WorkerID: "bench", Max: runs, Now: now, Lease: time.Hour}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/batch")
		})
	}
}

// benchStore opens and migrates the store at url (closed at the end of b)
// and makes a client of it.
// benchDBs are the stores the workflow benchmarks run on.
var benchDBs = []struct {
	name string
	url  func(testing.TB) string
}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}}

// applyLinear applies the workflow "linear" on queue "bench": steps no-op
// steps s0, s1, …, each needing the one before it.
func applyLinear(b *testing.B, c *Client, steps int) {
	b.Helper()
	bld := workflow.New("linear").Queue("bench")
	for i := 0; i < steps; i++ {
		st := bld.Step(fmt.Sprintf("s%d", i), "noop")
		if i > 0 {
			st.Needs(fmt.Sprintf("s%d", i-1))
		}
	}
	def, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := c.ApplyWorkflow(context.Background(), def); err != nil {
		b.Fatal(err)
	}
}

func benchStore(b *testing.B, url string) (store.Store, *Client) {
	b.Helper()
	s := migratedStore(b, url)
	c, err := NewClient(s, nil)
	if err != nil {
		b.Fatal(err)
	}
	return s, c
}

// migratedStore opens the store at url, migrated, closed when tb ends.
func migratedStore(tb testing.TB, url string) store.Store {
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
	return s
}
