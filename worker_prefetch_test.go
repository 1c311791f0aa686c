package backstop

import (
	"context"
	"sync"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
)

// prefetchRun is a worker of one queue ("pf", concurrency 2, Prefetch 2)
// over n tasks: the first two handlers return at once (the worker claims
// ahead once it has seen short runs), the others hold until gate is
// closed; it counts the handlers running at once.
type prefetchRun struct {
	c    *Client
	w    *Worker
	ids  []string
	gate chan struct{}
	open sync.Once

	mu               sync.Mutex
	running, maxRun  int
	started, settled int
}

func startPrefetchRun(t *testing.T, c *Client, n int) *prefetchRun {
	t.Helper()
	ctx := context.Background()
	ps := make([]EnqueueParams, n)
	for i := range ps {
		ps[i] = EnqueueParams{Queue: "pf", Kind: "k"}
	}
	res, err := c.EnqueueMany(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	r := &prefetchRun{c: c, gate: make(chan struct{})}
	for _, x := range res {
		r.ids = append(r.ids, x.Task.ID)
	}
	r.w, err = NewWorker(c, &WorkerConfig{Queues: map[string]int{"pf": 2}, Prefetch: 2, MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	r.w.Handle("k", HandlerFunc(func(ctx context.Context, tk *Task) error {
		r.mu.Lock()
		r.running++
		r.started++
		r.maxRun = max(r.maxRun, r.running)
		quick := r.started <= 2
		r.mu.Unlock()
		if !quick {
			<-r.gate
		}
		r.mu.Lock()
		r.running--
		r.mu.Unlock()
		return nil
	}))
	if err := r.w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.w.Stop(ctx)
	})
	return r
}

// release lets the handlers return.
func (r *prefetchRun) release() { r.open.Do(func() { close(r.gate) }) }

// waitClaimedAhead waits for the run's two handlers to hold their slots
// with two more tasks leased beside them, claimed ahead.
func (r *prefetchRun) waitClaimedAhead(t *testing.T) {
	testwait.For(t, "2 handlers running and 4 tasks leased", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.running == 2 && r.states(t)[bt.StateRunning] == 4
	})
}

// states counts the tasks by state.
func (r *prefetchRun) states(t *testing.T) map[bt.State]int {
	t.Helper()
	ts, err := r.c.List(context.Background(), ListParams{Queue: "pf", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m := map[bt.State]int{}
	for _, x := range ts {
		m[x.State]++
	}
	return m
}

// A worker with Prefetch claims that many tasks beyond its free slots: they
// are leased (running) while no more handlers than its concurrency run,
// and each starts once a slot frees.
func TestWorkerPrefetchClaimsAhead(t *testing.T) {
	forEachStoreClient(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		r := startPrefetchRun(t, c, 10)
		r.waitClaimedAhead(t)
		r.release()
		testwait.For(t, "every task succeeded", func() bool { return r.states(t)[bt.StateSucceeded] == 10 })
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.maxRun != 2 || r.started != 10 {
			t.Fatalf("%d handlers ran at most at once and %d started, want 2 and 10", r.maxRun, r.started)
		}
		for _, id := range r.ids {
			x, err := c.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if x.Attempt != 1 || len(x.Executions) != 1 || x.Executions[0].Outcome != bt.OutcomeSucceeded {
				t.Fatalf("task %s: attempt %d, executions %+v, want one success", id, x.Attempt, x.Executions)
			}
		}
	})
}

// When the worker stops, the tasks it claimed ahead and has not started are
// released at once, uncharged and recorded, while its running handlers
// finish within the grace; nothing else was claimed.
func TestWorkerPrefetchReleasedOnStop(t *testing.T) {
	forEachStoreClient(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		r := startPrefetchRun(t, c, 10)
		r.waitClaimedAhead(t)
		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stopped <- r.w.Stop(ctx)
		}()
		// The release does not wait for the running handlers (still held).
		testwait.For(t, "the 2 tasks claimed ahead released", func() bool {
			s := r.states(t)
			return s[bt.StateRunning] == 2 && s[bt.StatePending] == 6
		})
		r.release()
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		started := r.started
		r.mu.Unlock()
		if started != 4 {
			t.Fatalf("%d handlers started, want the 2 quick ones and the 2 running at the stop", started)
		}
		released, untouched := 0, 0
		for _, id := range r.ids {
			x, err := c.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case x.State == bt.StateSucceeded:
			case x.State != bt.StatePending || x.Attempt != 0:
				t.Fatalf("task %s: %s attempt %d, want pending and uncharged", id, x.State, x.Attempt)
			case len(x.Executions) == 0:
				untouched++
			case len(x.Executions) == 1 && x.Executions[0].Outcome == bt.OutcomeReleased:
				released++
			default:
				t.Fatalf("task %s: executions %+v, want none or one released", id, x.Executions)
			}
		}
		if s := r.states(t); s[bt.StateSucceeded] != 4 || released != 2 || untouched != 4 {
			t.Fatalf("%v; %d released, %d never claimed: want 4 succeeded, 2 released, 4 never claimed", s, released, untouched)
		}
	})
}

// A worker claims ahead only while its handlers have been running short:
// not before any finished, not while they take PrefetchMaxRun or more.
func TestPrefetchOnlyForShortRuns(t *testing.T) {
	q := &queueRunner{concurrency: 4, prefetch: 2}
	if n := q.claimable(); n != 4 {
		t.Fatalf("before any run: %d claimable, want 4", n)
	}
	q.ran(10 * time.Millisecond)
	if n := q.claimable(); n != 6 {
		t.Fatalf("after a short run: %d claimable, want 6", n)
	}
	for range 20 {
		q.ran(5 * time.Second)
	}
	if n := q.claimable(); n != 4 {
		t.Fatalf("after long runs (mean %s): %d claimable, want 4", time.Duration(q.meanRun.Load()), n)
	}
	for range 40 {
		q.ran(time.Millisecond)
	}
	if n := q.claimable(); n != 6 {
		t.Fatalf("after short runs again (mean %s): %d claimable, want 6", time.Duration(q.meanRun.Load()), n)
	}
}

// WorkerConfig.SettleParallelism sets the completers; by default the
// store's (two on Postgres, one on SQLite).
func TestWorkerSettleParallelism(t *testing.T) {
	forEachStoreClient(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		for _, set := range []int{0, 1, 3} {
			w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"q": 1}, SettleParallelism: set, MaintenanceInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			want := set
			if set == 0 {
				want = max(1, c.Store().Features().SettleParallelism)
			}
			if got := w.completers(); got != want {
				t.Errorf("SettleParallelism %d: %d completers, want %d", set, got, want)
			}
		}
		if _, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"q": 1}, SettleParallelism: -1}); err == nil {
			t.Error("SettleParallelism -1: no error")
		}
	})
}
