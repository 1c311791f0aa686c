package backstop

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/testwait"
)

// A handler runs on its attempt's goroutine: n handlers working at once
// add n goroutines to the worker's own, not one more each to wait on it.
// It counts the process's goroutines, so it runs alone (no test beside it).
func TestWorkerOneGoroutinePerAttempt(t *testing.T) {
	forEachStoreClientAlone(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		const n = 16
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"og": n}, PollInterval: 10 * time.Millisecond,
			MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		var working atomic.Int32
		w.Handle("k", HandlerFunc(func(ctx context.Context, _ *Task) error {
			working.Add(1)
			<-gate
			return nil
		}))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		stopped := false
		stop := func() {
			if stopped {
				return
			}
			stopped = true
			close(gate)
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := w.Stop(sctx); err != nil {
				t.Error(err)
			}
		}
		t.Cleanup(stop)
		// The fewest goroutines seen over a few samples: a claim's or a
		// pool's passing goroutines only add.
		fewest := func() int {
			m := runtime.NumGoroutine()
			for range 20 {
				time.Sleep(5 * time.Millisecond)
				m = min(m, runtime.NumGoroutine())
			}
			return m
		}
		// An idle worker first: its fetch loop, completers and heartbeat.
		w.claimingIdle(t)
		idle := fewest()
		ps := make([]EnqueueParams, n)
		for i := range ps {
			ps[i] = EnqueueParams{Queue: "og", Kind: "k"}
		}
		if _, err := c.EnqueueMany(ctx, ps); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "all handlers working", func() bool { return working.Load() == n })
		if got := fewest() - idle; got > n+2 {
			t.Errorf("%d handlers working add %d goroutines, want about %d (one each)", n, got, n)
		}
		stop()
		ts, err := c.List(ctx, ListParams{Queue: "og", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			if x.State != bt.StateSucceeded {
				t.Errorf("task %s: %s, want succeeded", x.ID, x.State)
			}
		}
	})
}

// claimingIdle waits until the worker has claimed and found nothing: its
// own goroutines have started and none is in a claim.
func (w *Worker) claimingIdle(t *testing.T) {
	t.Helper()
	testwait.For(t, "an idle worker", func() bool {
		return w.claiming.Load() == 0 && w.Running() == 0 && w.IdleFor() > 20*time.Millisecond
	})
}

// A handler that does not return within TimeoutGrace of its timeout is
// abandoned: the attempt is settled without it (ErrAbandoned in its
// detail) and its slot goes to the next task while it still runs; when it
// returns at last, nothing more is settled.
func TestWorkerAbandonsHandlerAfterGrace(t *testing.T) {
	forEachStoreClient(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"ab": 1}, PollInterval: 10 * time.Millisecond,
			TimeoutGrace: 50 * time.Millisecond, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		returned := make(chan struct{})
		var quick atomic.Int32
		w.Handle("stuck", HandlerFunc(func(ctx context.Context, _ *Task) error {
			defer close(returned)
			<-gate // ignores its context
			return nil
		}))
		w.Handle("quick", HandlerFunc(func(ctx context.Context, _ *Task) error {
			quick.Add(1)
			return nil
		}))
		stuck, err := c.Enqueue(ctx, EnqueueParams{Queue: "ab", Kind: "stuck", Timeout: 50 * time.Millisecond, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := w.Stop(sctx); err != nil {
				t.Error(err)
			}
		}()
		open := sync.OnceFunc(func() { close(gate) })
		defer func() { open(); <-returned }()
		testwait.For(t, "the stuck attempt settled", func() bool {
			tk, err := c.Get(ctx, stuck.Task.ID)
			return err == nil && tk.State == bt.StateDead
		})
		tk, err := c.Get(ctx, stuck.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(tk.Executions) != 1 || tk.Executions[0].Outcome != bt.OutcomeTimeout ||
			!strings.Contains(tk.Executions[0].ErrorDetail, engine.ErrAbandoned.Error()) {
			t.Fatalf("executions %+v, want one timeout abandoned", tk.Executions)
		}
		// The slot is free though the handler still runs.
		if _, err := c.Enqueue(ctx, EnqueueParams{Queue: "ab", Kind: "quick"}); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the next task run beside the abandoned handler", func() bool { return quick.Load() == 1 })
		select {
		case <-returned:
			t.Fatal("the stuck handler returned before its gate opened")
		default:
		}
		open()
		<-returned
		testwait.For(t, "the quick task settled", func() bool {
			ts, err := c.List(ctx, ListParams{Queue: "ab", Limit: 10})
			if err != nil || len(ts) != 2 {
				return false
			}
			for _, x := range ts {
				if x.Kind == "quick" && x.State != bt.StateSucceeded {
					return false
				}
			}
			return true
		})
		if tk, err := c.Get(ctx, stuck.Task.ID); err != nil || tk.State != bt.StateDead || len(tk.Executions) != 1 {
			t.Fatalf("after the stuck handler returned: %v, %+v", err, tk)
		}
	})
}

// A handler that ends its goroutine (runtime.Goexit, as t.FailNow does)
// without returning fails its attempt, and the worker still stops.
func TestWorkerHandlerGoexitFails(t *testing.T) {
	forEachStoreClient(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"gx": 2}, PollInterval: 10 * time.Millisecond,
			MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("k", HandlerFunc(func(ctx context.Context, _ *Task) error {
			runtime.Goexit()
			return nil
		}))
		res, err := c.Enqueue(ctx, EnqueueParams{Queue: "gx", Kind: "k", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the task settled", func() bool {
			tk, err := c.Get(ctx, res.Task.ID)
			return err == nil && tk.State != bt.StateRunning && tk.State != bt.StatePending
		})
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := w.Stop(sctx); err != nil {
			t.Fatal(err)
		}
		tk, err := c.Get(ctx, res.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != bt.StateDead || !strings.Contains(tk.LastError, "Goexit") {
			t.Fatalf("task %s (%q), want dead by the handler's Goexit", tk.State, tk.LastError)
		}
	})
}
