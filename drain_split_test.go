package backstop

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/telemetry"
	"github.com/backstophq/backstop/store"
	"go.opentelemetry.io/otel/trace"
)

// A measurement, not a check (docs/benchmarks.md, "The SQLite drain above
// the store"): what a drained task costs in this process's CPU and
// allocations at three heights, each on a fresh SQLite file of its own,
// the three in a rotating order per round:
//
//   - store: Store.Claim of 1,000, then Store.Settle of those 1,000 as
//     succeeded (the statements the engine runs, nothing around them);
//     store-busy: with a goroutine per claimed task beside it (below);
//     store-pipe: each claim before the previous claim's settle;
//   - engine: Engine.Claim, Engine.Decide per task, Engine.Settle and the
//     settle batch's telemetry, on one goroutine (no worker);
//   - worker: a Worker of 2,000 slots with a no-op handler, as `backstop
//     bench` drains (worker-nomaint: without the maintenance leader;
//     worker-timed: with the wall time inside the store's claims and
//     settles, and the claims' sizes).
//
// The client records metrics as `backstop bench` does (the SDK, no
// traces). Each run prints its CPU (getrusage) and allocations per task,
// the GC's share (runtime/metrics' estimate) and cycles, the peaks of the
// goroutines, their stacks and the live heap, and the settle batches.
// BACKSTOP_DRAIN_SPLIT names a directory for the files; _N the tasks per
// drain (100,000), _ROUNDS the rounds (3), _MODES a comma-separated subset
// (store,engine,worker), _SLOTS the worker's slots (2,000).
func TestDrainSplitSQLite(t *testing.T) {
	dir := os.Getenv("BACKSTOP_DRAIN_SPLIT")
	if dir == "" {
		t.Skip("BACKSTOP_DRAIN_SPLIT is not set")
	}
	n, rounds := 100_000, 3
	if v, err := strconv.Atoi(os.Getenv("BACKSTOP_DRAIN_SPLIT_N")); err == nil {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("BACKSTOP_DRAIN_SPLIT_ROUNDS")); err == nil {
		rounds = v
	}
	modes := []string{"store", "engine", "worker"}
	if v := os.Getenv("BACKSTOP_DRAIN_SPLIT_MODES"); v != "" {
		modes = strings.Split(v, ",")
	}
	for r := range rounds {
		for i := range modes {
			mode := modes[(r+i)%len(modes)]
			cpu, allocs := drainSplitRun(t, filepath.Join(dir, "split-"+mode+".db"), mode, n)
			fmt.Printf("split: round=%d mode=%s n=%d cpu_us_per_task=%.2f allocs_per_task=%.1f\n",
				r+1, mode, n, float64(cpu.Nanoseconds())/1e3/float64(n), float64(allocs)/float64(n))
		}
	}
}

func drainSplitCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// drainSplitGC is the GC's CPU so far (runtime/metrics' estimate, the
// assists included) and its completed cycles.
func drainSplitGC() (float64, uint64, [3]float64) {
	ms := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/cpu/classes/gc/mark/idle:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/dedicated:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/assist:cpu-seconds"}}
	metrics.Read(ms)
	return ms[0].Value.Float64(), ms[1].Value.Uint64(), [3]float64{ms[2].Value.Float64(), ms[3].Value.Float64(), ms[4].Value.Float64()}
}

func drainSplitMallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

func drainSplitRun(t *testing.T, path, mode string, n int) (time.Duration, uint64) {
	for _, sfx := range []string{"", "-wal", "-shm"} {
		os.Remove(path + sfx)
	}
	ctx := context.Background()
	s, err := dburl.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// As `backstop bench` runs: metrics recorded by the SDK, no traces
	// unless OTEL_* asks, warnings logged.
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "backstop-split", LogOutput: io.Discard, LogLevel: slog.LevelWarn})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	var st store.Store = s
	var timed *splitTimedStore
	if mode == "worker-timed" {
		timed = &splitTimedStore{Store: s}
		st = timed
	}
	c, err := NewClient(st, &Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})),
		MeterProvider: tel.MeterProvider, TracerProvider: tel.TracerProvider})
	if err != nil {
		t.Fatal(err)
	}
	const queue, batch = "split", 1000
	ps := make([]EnqueueParams, batch)
	for i := range ps {
		ps[i] = EnqueueParams{Queue: queue, Kind: "noop"}
	}
	for done := 0; done < n; done += batch {
		if _, err := c.EnqueueMany(ctx, ps[:min(batch, n-done)]); err != nil {
			t.Fatal(err)
		}
	}
	var settles, settled atomic.Int64
	var small atomic.Int64 // settle batches under 100
	c.e.SettleSeen = func(ss []store.Settlement) {
		settles.Add(1)
		settled.Add(int64(len(ss)))
		if len(ss) < 100 {
			small.Add(1)
		}
	}
	runtime.GC()
	// The peaks of the goroutines, their stacks and the live heap, sampled.
	sampled := make(chan [4]uint64)
	stopSampling := make(chan struct{})
	go func() {
		var peak [4]uint64
		ms := []metrics.Sample{{Name: "/sched/goroutines:goroutines"}, {Name: "/memory/classes/heap/stacks:bytes"},
			{Name: "/gc/heap/live:bytes"}, {Name: "/gc/stack/starting-size:bytes"}}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				sampled <- peak
				return
			case <-tick.C:
			}
			metrics.Read(ms)
			for i := range ms {
				peak[i] = max(peak[i], ms[i].Value.Uint64())
			}
		}
	}()
	cpu0, m0 := drainSplitCPU(), drainSplitMallocs()
	gc0, cycles0, cl0 := drainSplitGC()
	switch mode {
	case "store", "store-busy", "store-pipe":
		// store-busy: beside the store's loop, a goroutine per claimed task
		// that allocates what an attempt does and hands a settlement-sized
		// value to a collector over a channel of 1,000: the worker's burst
		// and garbage without its code, to tell what they cost the store.
		var (
			busyCh   chan store.Settlement
			busyDone chan struct{}
			sink     atomic.Int64
		)
		if mode == "store-busy" {
			busyCh, busyDone = make(chan store.Settlement, 1000), make(chan struct{})
			go func() {
				defer close(busyDone)
				for st := range busyCh {
					sink.Add(int64(len(st.TaskID)))
				}
			}()
			defer func() { close(busyCh); <-busyDone }()
		}
		// store-pipe: the next claim before the last claim's settle, as the
		// worker's claims run while the previous batch is unsettled.
		var prev []store.Settlement
		settle := func(ss []store.Settlement) {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := s.Settle(sctx, ss)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
		for done := 0; done < n; {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			tasks, err := s.Claim(cctx, store.ClaimParams{Queue: queue, WorkerID: "split", Max: batch, Now: time.Now(), Lease: 30 * time.Second})
			cancel()
			if err != nil || len(tasks) == 0 {
				t.Fatalf("claim: %d, %v", len(tasks), err)
			}
			ss := make([]store.Settlement, len(tasks))
			now := time.Now()
			for i, tk := range tasks {
				ss[i] = store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: "succeeded",
					State: "succeeded", FinishedAt: now, Queue: tk.Queue}
				if busyCh != nil {
					go func() {
						b := make([]byte, 448) // an attempt's size
						busyCh <- store.Settlement{TaskID: tk.ID, Error: string(b[:0]), FinishedAt: time.Now()}
					}()
				}
			}
			done += len(tasks)
			if mode != "store-pipe" {
				settle(ss)
				continue
			}
			if prev != nil {
				settle(prev)
			}
			prev = ss
		}
		if prev != nil {
			settle(prev)
		}
	case "engine":
		for done := 0; done < n; {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			tasks, _, err := c.e.Claim(cctx, engine.ClaimParams{Queue: queue, WorkerID: "split", Max: batch, Lease: 30 * time.Second})
			cancel()
			if err != nil || len(tasks) == 0 {
				t.Fatalf("claim: %d, %v", len(tasks), err)
			}
			ss := make([]store.Settlement, len(tasks))
			started := c.now()
			for i, tk := range tasks {
				ss[i] = c.e.Decide(engine.Report{Task: tk})
			}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			oks, err := c.e.Settle(sctx, ss)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			c.telemetry.SettledBatch(len(ss), func(i int) (*Task, trace.Span, time.Time, *store.Settlement) {
				return tasks[i], nil, started, &ss[i]
			}, oks)
			done += len(tasks)
		}
	case "worker", "worker-nomaint", "worker-timed":
		var handled atomic.Int64
		all := make(chan struct{})
		slots := 2000
		if v, err := strconv.Atoi(os.Getenv("BACKSTOP_DRAIN_SPLIT_SLOTS")); err == nil {
			slots = v
		}
		wcfg := &WorkerConfig{Queues: map[string]int{queue: slots}}
		if mode == "worker-nomaint" {
			wcfg.MaintenanceInterval = -1 // no maintenance leader: the worker alone
		}
		w, err := NewWorker(c, wcfg)
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("noop", HandlerFunc(func(context.Context, *Task) error {
			if handled.Add(1) == int64(n) {
				close(all)
			}
			return nil
		}))
		wall := time.Now()
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if timed != nil {
				el := time.Since(wall)
				fmt.Printf("split: mode=%s wall=%.3fs in_claim=%.3fs in_settle=%.3fs busy=%.2f\n", mode, el.Seconds(),
					time.Duration(timed.claim.Load()).Seconds(), time.Duration(timed.settle.Load()).Seconds(),
					float64(timed.claim.Load()+timed.settle.Load())/float64(el))
				fmt.Printf("split: claims (max:got) %v\n", timed.claims[:min(len(timed.claims), 30)])
			}
		}()
		select {
		case <-all:
		case <-time.After(5 * time.Minute):
			t.Fatalf("worker: %d of %d handled", handled.Load(), n)
		}
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = w.Stop(sctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("mode %q: want store, engine or worker", mode)
	}
	cpu, allocs := drainSplitCPU()-cpu0, drainSplitMallocs()-m0
	gc1, cycles1, cl1 := drainSplitGC()
	if fi, err := os.Stat(path + "-wal"); err == nil {
		fmt.Printf("split: mode=%s wal=%.1fMB\n", mode, float64(fi.Size())/1e6)
	}
	close(stopSampling)
	peak := <-sampled
	fmt.Printf("split: mode=%s peak goroutines=%d stacks=%.1fMB live_heap=%.1fMB starting_stack=%dB\n", mode, peak[0],
		float64(peak[1])/1e6, float64(peak[2])/1e6, peak[3])
	us := func(a, b float64) float64 { return (b - a) * 1e6 / float64(n) }
	fmt.Printf("split: mode=%s gc_us_per_task=%.2f (idle %.2f dedicated %.2f assist %.2f) gc_cycles=%d\n", mode, us(gc0, gc1),
		us(cl0[0], cl1[0]), us(cl0[1], cl1[1]), us(cl0[2], cl1[2]), cycles1-cycles0)
	if settles.Load() > 0 {
		fmt.Printf("split: mode=%s settles=%d mean=%.0f under_100=%d\n", mode, settles.Load(),
			float64(settled.Load())/float64(settles.Load()), small.Load())
	}
	left, err := c.List(ctx, ListParams{Queue: queue, States: []State{"pending", "running"}, Limit: 1})
	if err != nil || len(left) > 0 {
		t.Fatalf("%s: left %d tasks not succeeded (%v)", mode, len(left), err)
	}
	return cpu, allocs
}

// splitTimedStore times the store's claims and settles (wall time inside
// them), to tell how much of a drain the writer is busy.
type splitTimedStore struct {
	store.Store
	claim, settle atomic.Int64
	mu            sync.Mutex
	claims        []string // max:got of each claim
}

func (s *splitTimedStore) Claim(ctx context.Context, p store.ClaimParams) ([]*Task, error) {
	t0 := time.Now()
	defer func() { s.claim.Add(int64(time.Since(t0))) }()
	ts, err := s.Store.Claim(ctx, p)
	s.mu.Lock()
	s.claims = append(s.claims, fmt.Sprintf("%d:%d", p.Max, len(ts)))
	s.mu.Unlock()
	return ts, err
}

func (s *splitTimedStore) Settle(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	t0 := time.Now()
	defer func() { s.settle.Add(int64(time.Since(t0))) }()
	return s.Store.Settle(ctx, ss)
}
