// Package bench measures Backstop's throughput and latency with no-op tasks
// on a real store, for `backstop bench` and the Go benchmarks.
//
// Every run uses a private queue (bench-<time>-<random>) so runs on the same
// database never see each other's tasks. Figures always include the
// completion writes: a task counts once the store shows it succeeded. The
// package must never touch tasks outside its own queue.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/probe"
)

// Config chooses the mode and its size. Zero values take the default named
// at the end of each field's comment.
type Config struct {
	// N tasks to insert, then work down (drain mode). Default: 100,000
	// unless Duration is set.
	N int
	// Duration of continuous mode (insert and work at once), or of
	// latency mode with Rate.
	Duration time.Duration
	// Rate, with Duration, is latency mode: one enqueue per task at this
	// many tasks per second, reporting enqueue-to-start latency.
	Rate float64
	// Workers is the worker's concurrency. Default: 2000 (what River's bench uses).
	Workers int
	// Batch is the size of each EnqueueMany. Default: 1,000.
	Batch int
	// Queue to use. Default: a fresh private name.
	Queue string
	// Progress receives the report lines before the last. Default: none.
	Progress io.Writer
	// FollowEvents (drain mode): a subscriber follows the event log's
	// `all` stream during the run and its delivery lag is reported.
	FollowEvents bool
	// Payload of every task (a JSON object). Default: none ({}).
	Payload json.RawMessage
	// NoCanary (latency mode): no canary beside the run (canary.go).
	NoCanary bool
}

func (c Config) withDefaults() Config {
	if c.N == 0 && c.Duration == 0 {
		c.N = 100_000
	}
	if c.Workers == 0 {
		c.Workers = 2000
	}
	if c.Batch == 0 {
		c.Batch = 1000
	}
	if c.Queue == "" {
		c.Queue = NewQueueName()
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.N < 0 || c.Workers < 0 || c.Batch < 0 || c.Duration < 0 || c.Rate < 0:
		return errors.New("bench: sizes, durations and rates must not be negative")
	case c.N > 0 && c.Duration > 0:
		return errors.New("bench: give -n (drain) or --duration (continuous, or latency with --rate), not both")
	case c.Rate > 0 && c.Duration == 0:
		return errors.New("bench: --rate needs --duration")
	}
	if err := CheckPayload(c.Payload); err != nil {
		return err
	}
	return nil
}

// NewQueueName is a queue name no other run uses.
func NewQueueName() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "bench-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// Result is what a run measured.
type Result struct {
	Mode    string // drain, continuous or latency
	Queue   string
	Worked  int           // tasks settled as succeeded by the worker
	Elapsed time.Duration // from worker start to the last completion written
	// Enqueued and EnqueueElapsed describe the inserts.
	Enqueued       int
	EnqueueElapsed time.Duration
	// Latency mode: enqueue-to-start latency percentiles.
	Samples       int
	P50, P99, Max time.Duration
	// EnqueueP50, EnqueueP99 (latency mode): how long the producer's
	// Enqueue calls took, waiting for a coalesced batch included.
	EnqueueP50, EnqueueP99 time.Duration
	// Stages (latency mode): each pickup's stages (stages.go), and with
	// the stage probe claim_to_start's parts (claim_to_start.<part>).
	Stages []StageFigure
	// Canary (latency mode on Postgres): the server's own commit floor
	// measured beside the run (canary.go); nil elsewhere.
	Canary *CanaryResult
	// GoRuntime (latency mode): the scheduler's and the GC's figures over
	// the run (goruntime.go).
	GoRuntime *GoRuntimeResult
	// Follow: the event-log follower's figures (FollowEvents).
	Follow *FollowResult
}

// JobsPerSec is Worked per second of Elapsed.
func (r *Result) JobsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Worked) / r.Elapsed.Seconds()
}

// Summary is the last line of `backstop bench`; scripts parse it.
func (r *Result) Summary() string {
	return fmt.Sprintf("bench: worked=%d elapsed=%.3fs jobs_per_sec=%.1f", r.Worked, r.Elapsed.Seconds(), r.JobsPerSec())
}

// Run runs the mode cfg selects.
func Run(ctx context.Context, c *backstop.Client, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Rate > 0:
		return Latency(ctx, c, cfg)
	case cfg.Duration > 0:
		return Continuous(ctx, c, cfg)
	default:
		return Drain(ctx, c, cfg)
	}
}

// Drain inserts cfg.N tasks, then measures how fast one worker works them
// down, up to the last completion written.
func Drain(ctx context.Context, c *backstop.Client, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	res := &Result{Mode: "drain", Queue: cfg.Queue}
	var follower *Follower
	if cfg.FollowEvents {
		f, err := StartFollower(ctx, c, cfg.Queue)
		if err != nil {
			return nil, err
		}
		follower = f
	}
	start := time.Now()
	if err := EnqueuePayload(ctx, c, cfg.Queue, cfg.N, cfg.Batch, cfg.Payload); err != nil {
		return nil, err
	}
	res.Enqueued, res.EnqueueElapsed = cfg.N, time.Since(start)
	fmt.Fprintf(cfg.Progress, "bench: mode=drain store=%s queue=%s enqueued=%d in %.3fs (%.0f/s, batches of %d)\n",
		c.Store().Driver(), cfg.Queue, cfg.N, res.EnqueueElapsed.Seconds(),
		float64(cfg.N)/res.EnqueueElapsed.Seconds(), cfg.Batch)
	cost := startCost()
	worked, elapsed, err := Work(ctx, c, cfg.Queue, cfg.N, cfg.Workers)
	res.Worked, res.Elapsed = worked, elapsed
	if worked > 0 {
		fmt.Fprintln(cfg.Progress, cost.report(worked))
	}
	if follower != nil {
		fr, ferr := follower.Stop(cfg.N, 30*time.Second)
		res.Follow = &fr
		fmt.Fprintln(cfg.Progress, fr.String())
		err = errors.Join(err, ferr)
	}
	if err != nil {
		return res, err
	}
	return res, Verify(ctx, c, cfg.Queue, false)
}

// Enqueue inserts n no-op tasks into queue, batch at a time.
func Enqueue(ctx context.Context, c *backstop.Client, queue string, n, batch int) error {
	return EnqueuePayload(ctx, c, queue, n, batch, nil)
}

// EnqueuePayload is Enqueue of tasks with payload (nil: none).
func EnqueuePayload(ctx context.Context, c *backstop.Client, queue string, n, batch int, payload json.RawMessage) error {
	params := make([]backstop.EnqueueParams, 0, min(n, batch))
	for done := 0; done < n; {
		params = params[:0]
		for range min(batch, n-done) {
			params = append(params, backstop.EnqueueParams{Queue: queue, Kind: "noop", Payload: payload})
		}
		if _, err := c.EnqueueMany(ctx, params); err != nil {
			return fmt.Errorf("bench: enqueue: %w", err)
		}
		done += len(params)
	}
	return nil
}

// stallTimeout ends a run whose worker makes no progress at all.
const stallTimeout = 2 * time.Minute

// Work starts a worker on queue and returns once n tasks have been handled
// and their completions written (the worker stopped), with the time that
// took from the worker's start.
func Work(ctx context.Context, c *backstop.Client, queue string, n, workers int) (int, time.Duration, error) {
	var handled atomic.Int64
	all := make(chan struct{})
	w, err := newWorker(c, queue, workers, func() {
		if handled.Add(1) == int64(n) {
			close(all)
		}
	})
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return 0, 0, err
	}
	waitErr := waitProgress(ctx, all, &handled)
	if err := stopWorker(w); err != nil && waitErr == nil {
		waitErr = err
	}
	elapsed := time.Since(start)
	return int(min(handled.Load(), int64(n))), elapsed, waitErr
}

// waitProgress waits for done, failing if the count stops moving.
func waitProgress(ctx context.Context, done <-chan struct{}, count *atomic.Int64) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastMove := count.Load(), time.Now()
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if n := count.Load(); n != last {
				last, lastMove = n, time.Now()
			} else if time.Since(lastMove) > stallTimeout {
				return fmt.Errorf("bench: no task handled for %s (%d so far)", stallTimeout, n)
			}
		}
	}
}

func newWorker(c *backstop.Client, queue string, workers int, onDone func()) (*backstop.Worker, error) {
	w, err := backstop.NewWorker(c, &backstop.WorkerConfig{Queues: map[string]int{queue: workers}})
	if err != nil {
		return nil, err
	}
	w.Handle("noop", backstop.HandlerFunc(func(context.Context, *backstop.Task) error {
		onDone()
		return nil
	}))
	return w, nil
}

// stopWorker drains the worker; its handlers are no-ops, so the grace is
// only a bound. Stop returns after every completion is written.
func stopWorker(w *backstop.Worker) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return w.Stop(ctx)
}

// Verify checks that the worker left nothing behind in queue: every task
// succeeded (or, with pendingOK, is still waiting to be claimed).
func Verify(ctx context.Context, c *backstop.Client, queue string, pendingOK bool) error {
	bad := []bt.State{bt.StateScheduled, bt.StateRunning, bt.StateDead, bt.StateCanceled, bt.StateBuffered}
	if !pendingOK {
		bad = append(bad, bt.StatePending)
	}
	left, err := c.List(ctx, backstop.ListParams{Queue: queue, States: bad, Limit: 5})
	if err != nil {
		return fmt.Errorf("bench: verify: %w", err)
	}
	if len(left) > 0 {
		return fmt.Errorf("bench: verify: task %s of queue %s is %s, want succeeded (last error %q)",
			left[0].ID, queue, left[0].State, left[0].LastError)
	}
	return nil
}

// Continuous enqueues and works at once for cfg.Duration: a producer keeps
// a bounded backlog while the worker drains it.
func Continuous(ctx context.Context, c *backstop.Client, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	res := &Result{Mode: "continuous", Queue: cfg.Queue}
	var handled atomic.Int64
	w, err := newWorker(c, cfg.Queue, cfg.Workers, func() { handled.Add(1) })
	if err != nil {
		return nil, err
	}
	// Keep enough waiting that the worker never starves, not so much that
	// the run measures a growing table.
	backlog := int64(max(4*cfg.Batch, 2*cfg.Workers))
	pctx, stopProducer := context.WithTimeout(ctx, cfg.Duration)
	defer stopProducer()
	var (
		enqueued int64
		prodErr  error
		prodDone = make(chan struct{})
	)
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	go func() {
		defer close(prodDone)
		for pctx.Err() == nil {
			if enqueued-handled.Load() >= backlog {
				time.Sleep(time.Millisecond)
				continue
			}
			if err := EnqueuePayload(pctx, c, cfg.Queue, cfg.Batch, cfg.Batch, cfg.Payload); err != nil {
				if pctx.Err() == nil {
					prodErr = err
				}
				return
			}
			enqueued += int64(cfg.Batch)
		}
	}()
	<-prodDone
	err = stopWorker(w)
	res.Elapsed = time.Since(start)
	res.Worked, res.Enqueued, res.EnqueueElapsed = int(handled.Load()), int(enqueued), cfg.Duration
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if err := errors.Join(prodErr, err); err != nil {
		return res, err
	}
	fmt.Fprintf(cfg.Progress, "bench: mode=continuous store=%s queue=%s enqueued=%d (%.0f/s) workers=%d\n",
		c.Store().Driver(), cfg.Queue, enqueued, float64(enqueued)/res.Elapsed.Seconds(), cfg.Workers)
	return res, Verify(ctx, c, cfg.Queue, true)
}

// maxInFlight bounds the latency producer's enqueues under way at once.
const maxInFlight = 256

// Latency enqueues single tasks (Client.Enqueue, one call per task) at
// cfg.Rate per second for cfg.Duration, on schedule however long each
// takes (calls overlap, at most maxInFlight), and measures, for each, the
// time from its creation to its handler's start. The rate it reports is
// the one it held.
func Latency(ctx context.Context, c *backstop.Client, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	res := &Result{Mode: "latency", Queue: cfg.Queue}
	var (
		mu      sync.Mutex
		lat     = make([]time.Duration, 0, int(cfg.Rate*cfg.Duration.Seconds())+1)
		handled atomic.Int64
		st      = newStages(time.Now(), cap(lat))
	)
	w, err := backstop.NewWorker(c, &backstop.WorkerConfig{Queues: map[string]int{cfg.Queue: cfg.Workers}})
	if err != nil {
		return nil, err
	}
	wctx := ctx
	if os.Getenv("BACKSTOP_BENCH_STAGES") != "" {
		// The stage probe: the worker marks its claims and hand-offs
		// (internal/probe) to st.
		wctx = probe.WithSink(ctx, st)
	}
	var k *canary
	if !cfg.NoCanary {
		if k, err = startCanary(ctx, c.Store(), cfg.Queue); err != nil {
			return nil, err
		}
	}
	canaryDone := false
	defer func() {
		if k != nil && !canaryDone {
			_, _ = k.finish(ctx)
		}
	}()
	gort := startGoRuntime()
	w.Handle("noop", backstop.HandlerFunc(func(_ context.Context, t *backstop.Task) error {
		now := time.Now()
		d := now.Sub(t.CreatedAt)
		st.started(t.ID, t.CreatedAt, t.AttemptedAt, now)
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		handled.Add(1)
		return nil
	}))
	start := time.Now()
	if err := w.Start(wctx); err != nil {
		return nil, err
	}
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	// The producer keeps the schedule without waiting for each enqueue:
	// each is its own goroutine, as concurrent requests of an application
	// would be, up to maxInFlight at once (beyond that it falls behind,
	// and the rate it reports says so).
	var (
		enqueued, inFlight, peak int
		prodErr                  error
		calls                    = make([]time.Duration, 0, cap(lat)) // each Enqueue call's time
		pmu                      sync.Mutex
		wg                       sync.WaitGroup
	)
	for {
		next := start.Add(time.Duration(enqueued) * interval)
		if next.Sub(start) >= cfg.Duration || ctx.Err() != nil {
			break
		}
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		pmu.Lock()
		for inFlight >= maxInFlight && prodErr == nil {
			pmu.Unlock()
			time.Sleep(100 * time.Microsecond)
			pmu.Lock()
		}
		failed := prodErr != nil
		inFlight++
		peak = max(peak, inFlight)
		pmu.Unlock()
		if failed {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			r, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: cfg.Queue, Kind: "noop", Payload: cfg.Payload})
			d := time.Since(t0)
			if err == nil {
				st.committed(r.Task.ID, t0.Add(d))
			}
			pmu.Lock()
			calls = append(calls, d)
			inFlight--
			if err != nil && prodErr == nil {
				prodErr = fmt.Errorf("bench: enqueue: %w", err)
			}
			pmu.Unlock()
		}()
		enqueued++
	}
	wg.Wait()
	res.Enqueued, res.EnqueueElapsed = enqueued, time.Since(start)
	// Let the last tasks start, then stop.
	deadline := time.Now().Add(30 * time.Second)
	for handled.Load() < int64(enqueued) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	err = stopWorker(w)
	res.Elapsed = time.Since(start)
	res.Worked = int(handled.Load())
	gr := gort.stop()
	res.GoRuntime = &gr
	if k != nil {
		canaryDone = true
		var kerr error
		res.Canary, kerr = k.finish(ctx)
		err = errors.Join(err, kerr)
	}
	if err := errors.Join(prodErr, err, ctx.Err()); err != nil {
		return res, err
	}
	mu.Lock()
	slices.Sort(lat)
	res.Samples = len(lat)
	if len(lat) > 0 {
		res.P50, res.P99, res.Max = percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1]
	}
	mu.Unlock()
	fmt.Fprintf(cfg.Progress, "bench: mode=latency store=%s queue=%s enqueued=%d rate=%.0f/s (target %.0f/s) in_flight_max=%d workers=%d\n",
		c.Store().Driver(), cfg.Queue, enqueued, float64(enqueued)/res.EnqueueElapsed.Seconds(), cfg.Rate, peak, cfg.Workers)
	fmt.Fprintf(cfg.Progress, "bench: latency enqueue_to_start p50=%s p99=%s max=%s samples=%d\n",
		ms(res.P50), ms(res.P99), ms(res.Max), res.Samples)
	if len(calls) > 0 {
		slices.Sort(calls)
		res.EnqueueP50, res.EnqueueP99 = percentile(calls, 0.50), percentile(calls, 0.99)
		fmt.Fprintf(cfg.Progress, "bench: latency enqueue_call p50=%s p99=%s (of enqueue_to_start: from the task's creation to its commit)\n",
			ms(res.EnqueueP50), ms(res.EnqueueP99))
	}
	if res.Canary != nil {
		fmt.Fprintln(cfg.Progress, res.Canary.String())
	}
	res.Stages = st.report(cfg.Progress)
	fmt.Fprintln(cfg.Progress, res.GoRuntime.String())
	if res.Worked < enqueued {
		return res, fmt.Errorf("bench: only %d of %d tasks started within 30s of the last enqueue", res.Worked, enqueued)
	}
	return res, Verify(ctx, c, cfg.Queue, false)
}

// percentile of sorted samples, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// CheckPayload: a bench payload is empty (none) or a JSON object, what
// every task of the run and every floor row carry.
func CheckPayload(p json.RawMessage) error {
	if len(p) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p, &m); err != nil || m == nil {
		return fmt.Errorf("bench: --payload must be a JSON object, got %.40q", p)
	}
	return nil
}

// JSONResult is a run's result as `backstop bench -o json` prints it:
// times in milliseconds (durations) or seconds (elapsed), the latency
// mode's figures under latency, the canary's (Postgres) under canary.
type JSONResult struct {
	Mode            string       `json:"mode"`
	Queue           string       `json:"queue"`
	Worked          int          `json:"worked"`
	ElapsedS        float64      `json:"elapsed_s"`
	JobsPerSec      float64      `json:"jobs_per_sec"`
	Enqueued        int          `json:"enqueued"`
	EnqueueElapsedS float64      `json:"enqueue_elapsed_s"`
	Latency         *JSONLatency `json:"latency,omitempty"`
	Canary          *JSONCanary  `json:"canary,omitempty"`
	GoRuntime       *JSONGo      `json:"go_runtime,omitempty"`
}

// JSONLatency is the latency mode's figures: enqueue-to-start, the
// Enqueue calls, and each stage (stages.go).
type JSONLatency struct {
	Samples        int                  `json:"samples"`
	P50Ms          float64              `json:"p50_ms"`
	P99Ms          float64              `json:"p99_ms"`
	MaxMs          float64              `json:"max_ms"`
	EnqueueCallP50 float64              `json:"enqueue_call_p50_ms"`
	EnqueueCallP99 float64              `json:"enqueue_call_p99_ms"`
	Stages         map[string]JSONStage `json:"stages,omitempty"`
	RatePerSec     float64              `json:"rate_per_sec"`
}

// JSONStage is a stage's p50 and p99.
type JSONStage struct {
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// JSONCanary is the canary's commits and their latency.
type JSONCanary struct {
	Commits int     `json:"commits"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// JSONGo is the Go runtime's figures over a latency run.
type JSONGo struct {
	SchedLatencyP50Ms float64 `json:"sched_latency_p50_ms"`
	SchedLatencyP99Ms float64 `json:"sched_latency_p99_ms"`
	GCCycles          uint64  `json:"gc_cycles"`
	GCPauseP99Ms      float64 `json:"gc_pause_p99_ms"`
	GCPauseMaxMs      float64 `json:"gc_pause_max_ms"`
}

// JSON is r as `backstop bench -o json` prints it.
func (r *Result) JSON() JSONResult {
	j := JSONResult{Mode: r.Mode, Queue: r.Queue, Worked: r.Worked, ElapsedS: r.Elapsed.Seconds(),
		JobsPerSec: r.JobsPerSec(), Enqueued: r.Enqueued, EnqueueElapsedS: r.EnqueueElapsed.Seconds()}
	if r.Mode == "latency" {
		l := &JSONLatency{Samples: r.Samples, P50Ms: msf(r.P50), P99Ms: msf(r.P99), MaxMs: msf(r.Max),
			EnqueueCallP50: msf(r.EnqueueP50), EnqueueCallP99: msf(r.EnqueueP99)}
		if r.EnqueueElapsed > 0 {
			l.RatePerSec = float64(r.Enqueued) / r.EnqueueElapsed.Seconds()
		}
		if len(r.Stages) > 0 {
			l.Stages = map[string]JSONStage{}
			for _, s := range r.Stages {
				l.Stages[s.Name] = JSONStage{P50Ms: msf(s.P50), P99Ms: msf(s.P99)}
			}
		}
		j.Latency = l
	}
	if r.Canary != nil {
		j.Canary = &JSONCanary{Commits: r.Canary.Commits, P50Ms: msf(r.Canary.P50), P99Ms: msf(r.Canary.P99), MaxMs: msf(r.Canary.Max)}
	}
	if g := r.GoRuntime; g != nil {
		j.GoRuntime = &JSONGo{SchedLatencyP50Ms: msf(g.SchedP50), SchedLatencyP99Ms: msf(g.SchedP99), GCCycles: g.GCCycles,
			GCPauseP99Ms: msf(g.GCPauseP99), GCPauseMaxMs: msf(g.GCPauseMax)}
	}
	return j
}
