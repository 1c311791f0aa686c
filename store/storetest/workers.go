package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// testWorkers: the worker registry, through the store and through a real
// Worker.
func (s *suite) testWorkers(t *testing.T) {
	t.Run("Registry", s.testWorkerRegistry)
	t.Run("WorkerLifecycle", s.testWorkerLifecycle)
	t.Run("RemoteRelease", s.testRemoteRelease)
	t.Run("Events", s.testWorkerEvents) // workers_events.go
}

func workerIDs(ws []store.WorkerInfo) string {
	out := ""
	for i, w := range ws {
		if i > 0 {
			out += " "
		}
		out += w.ID + ":" + string(w.State)
	}
	return out
}

func (s *suite) testWorkerRegistry(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{WorkerStaleAfter: time.Minute})
	st := b.store
	now := b.clock.Now()
	reg := func(id string, queues ...string) {
		t.Helper()
		err := st.RegisterWorker(b.ctx, store.WorkerInfo{ID: id, Host: "h-" + id, PID: 42, Queues: queues, Version: "v1",
			Labels: map[string]string{"zone": "a"}, StartedAt: now})
		if err != nil {
			t.Fatal(err)
		}
	}
	reg("w1", "mail", "sms")
	reg("w2", "mail")
	reg("w3", "mail_x") // "mail" must not match "mail_x" (no LIKE wildcards)
	list := func(p backstop.WorkerListParams) string {
		t.Helper()
		ws, err := b.c.Workers(b.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return workerIDs(ws)
	}
	eq(t, "all", list(backstop.WorkerListParams{}), "w1:active w2:active w3:active")
	eq(t, "queue mail", list(backstop.WorkerListParams{Queue: "mail"}), "w1:active w2:active")
	eq(t, "queue sms", list(backstop.WorkerListParams{Queue: "sms"}), "w1:active")
	eq(t, "page", list(backstop.WorkerListParams{AfterID: "w1", Limit: 1}), "w2:active")

	w, err := b.c.Worker(b.ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if w.Host != "h-w1" || w.PID != 42 || fmt.Sprint(w.Queues) != "[mail sms]" || w.Version != "v1" || w.Labels["zone"] != "a" ||
		!w.StartedAt.Equal(now) || !w.LastSeen.Equal(now) || w.StoppedAt != nil || w.Remote || len(w.Executions) != 0 {
		t.Fatalf("worker w1: %+v", w)
	}
	if _, err := b.c.Worker(b.ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown worker: %v", err)
	}
	if err := st.SetWorkerState(b.ctx, "nope", store.WorkerStopped, now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("state of an unknown worker: %v", err)
	}

	// Two minutes without a sighting: stale, unless stopped; a touch
	// brings one back.
	if err := st.SetWorkerState(b.ctx, "w3", store.WorkerStopped, now); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(2 * time.Minute)
	if err := st.TouchWorkers(b.ctx, []string{"w2", "unknown"}, b.clock.Now()); err != nil {
		t.Fatal(err)
	}
	eq(t, "after 2m", list(backstop.WorkerListParams{}), "w1:stale w2:active w3:stopped")
	eq(t, "stale", list(backstop.WorkerListParams{State: store.WorkerStale}), "w1:stale")
	eq(t, "active", list(backstop.WorkerListParams{State: store.WorkerActive}), "w2:active")
	eq(t, "stopped", list(backstop.WorkerListParams{State: store.WorkerStopped}), "w3:stopped")
	counts, err := b.c.WorkerCounts(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "counts", fmt.Sprint(counts), fmt.Sprint(map[store.WorkerState]int{store.WorkerActive: 1, store.WorkerStale: 1,
		store.WorkerStopped: 1, store.WorkerStopping: 0}))
	if w, _ := b.c.Worker(b.ctx, "w3"); w == nil || w.StoppedAt == nil {
		t.Fatalf("stopped worker without stopped_at: %+v", w)
	}

	// A remote worker's first sighting registers it; the next only moves
	// last_seen (and revives a stale or stopped worker).
	if err := remote.New(b.c.Engine()).SeeWorker(b.ctx, "r1", "10.0.0.1", []string{"mail"}); err != nil {
		t.Fatal(err)
	}
	first, _ := b.c.Worker(b.ctx, "r1")
	b.clock.Advance(time.Second)
	if err := remote.New(b.c.Engine()).SeeWorker(b.ctx, "r1", "elsewhere", nil); err != nil {
		t.Fatal(err)
	}
	r1, _ := b.c.Worker(b.ctx, "r1")
	if r1 == nil || !r1.Remote || r1.Host != "10.0.0.1" || !r1.StartedAt.Equal(first.StartedAt) || !r1.LastSeen.After(first.LastSeen) ||
		r1.State != store.WorkerActive || fmt.Sprint(r1.Queues) != "[mail]" {
		t.Fatalf("remote worker: %+v (first %+v)", r1, first)
	}
	if err := remote.New(b.c.Engine()).SeeWorker(b.ctx, "w3", "", nil); err != nil {
		t.Fatal(err)
	}
	if w, _ := b.c.Worker(b.ctx, "w3"); w.State != store.WorkerActive || w.StoppedAt != nil {
		t.Fatalf("a stopped worker seen again: %+v", w)
	}

	// Recent executions, newest first.
	for i := range 3 {
		b.enqueue(backstop.EnqueueParams{Queue: "ex", Kind: "k", ID: fmt.Sprintf("t%d", i)})
	}
	for range 3 {
		b.clock.Advance(time.Millisecond)
		ts, err := st.Claim(b.ctx, store.ClaimParams{Queue: "ex", WorkerID: "w2", Max: 1, Now: b.clock.Now(), Lease: time.Minute})
		if err != nil || len(ts) != 1 {
			t.Fatalf("claim: %v %v", ts, err)
		}
		settle(t, b, store.Settlement{TaskID: ts[0].ID, ExecutionID: ts[0].ExecutionID, Outcome: backstop.OutcomeSucceeded,
			FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
	}
	w2, err := b.c.Worker(b.ctx, "w2")
	if err != nil || len(w2.Executions) != 3 || w2.Executions[0].TaskID != "t2" || w2.Executions[2].TaskID != "t0" {
		t.Fatalf("w2 executions: %+v %v", w2, err)
	}

	for _, p := range []backstop.WorkerListParams{{State: "bogus"}, {Limit: -1}, {Limit: 10001}, {Queue: "bad queue!"}} {
		if _, err := b.c.Workers(b.ctx, p); !errors.Is(err, backstop.ErrInvalid) {
			t.Errorf("Workers(%+v): %v, want ErrInvalid", p, err)
		}
	}
}

// testWorkerLifecycle: a Worker registers on Start (active, its queues,
// host, pid, labels), stays seen while it runs, and is stopped after Stop.
func (s *suite) testWorkerLifecycle(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{WorkerStaleAfter: time.Minute})
	w := b.worker(&backstop.WorkerConfig{ID: "life", Queues: map[string]int{"b": 1, "a": 1}, HeartbeatInterval: 20 * time.Millisecond,
		Lease: time.Second, Labels: map[string]string{"role": "test"}, Version: "1.2.3"}, nil)
	info, err := b.c.Worker(b.ctx, "life")
	if err != nil {
		t.Fatal(err)
	}
	if info.State != store.WorkerActive || fmt.Sprint(info.Queues) != "[a b]" || info.PID == 0 || info.Labels["role"] != "test" ||
		info.Version != "1.2.3" || info.Remote {
		t.Fatalf("registered: %+v", info)
	}
	b.clock.Advance(30 * time.Second)
	testwait.For(t, "a registry heartbeat", func() bool {
		cur, err := b.c.Worker(b.ctx, "life")
		return err == nil && cur.LastSeen.After(info.LastSeen)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped, err := b.c.Worker(b.ctx, "life")
	if err != nil || stopped.State != store.WorkerStopped || stopped.StoppedAt == nil {
		t.Fatalf("after Stop: %+v %v", stopped, err)
	}
}

// testRemoteRelease: a remote attempt given back on a drain is not
// charged: pending again, attempt count unchanged, execution released; a
// stale token changes nothing.
func (s *suite) testRemoteRelease(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.enqueue(backstop.EnqueueParams{ID: "rel", Queue: "q", Kind: "k", MaxAttempts: 1})
	ts, err := remote.New(b.c.Engine()).Claim(b.ctx, remote.Claim{Queues: []string{"q"}, WorkerID: "rw"})
	if err != nil || len(ts) != 1 {
		t.Fatalf("claim: %v %v", ts, err)
	}
	res, err := remote.New(b.c.Engine()).Release(b.ctx, "rel", ts[0].LeaseToken, &backstop.Progress{Total: 3, Completed: 1})
	if err != nil || res.State != backstop.StatePending || res.Outcome != backstop.OutcomeReleased {
		t.Fatalf("release: %+v %v", res, err)
	}
	got := b.get("rel")
	if got.State != backstop.StatePending || got.Attempt != 0 || len(got.Executions) != 1 ||
		got.Executions[0].Outcome != backstop.OutcomeReleased || got.Progress.Completed != 1 {
		t.Fatalf("after release: %+v", got)
	}
	if _, err := remote.New(b.c.Engine()).Release(b.ctx, "rel", ts[0].LeaseToken, nil); !errors.Is(err, remote.ErrLeaseNotCurrent) {
		t.Fatalf("stale release: %v", err)
	}
	// Its only attempt is still there to use.
	ts, err = remote.New(b.c.Engine()).Claim(b.ctx, remote.Claim{Queues: []string{"q"}, WorkerID: "rw"})
	if err != nil || len(ts) != 1 || ts[0].Attempt != 1 {
		t.Fatalf("claim again: %+v %v", ts, err)
	}
}
