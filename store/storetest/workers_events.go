package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// testWorkerEvents: workers' lifecycle is in the event log (worker.started,
// worker.heartbeat_lost once per silence, worker.stopped once), for
// in-process and remote workers, and the node.<host> and execution.<id>
// streams serve what docs/events.md says.
func (s *suite) testWorkerEvents(t *testing.T) {
	t.Run("InProcess", s.testWorkerEventsInProcess)
	t.Run("Remote", s.testWorkerEventsRemote)
	t.Run("HeartbeatLost", s.testWorkerHeartbeatLost)
	t.Run("NodeAndExecutionStreams", s.testNodeExecutionStreams)
}

// readStream reads a stream whole (waiting until it holds n events) and
// returns its events.
func (b *bundle) readStream(name string, n int) []bt.Event {
	b.t.Helper()
	st, err := store.ParseStream(name)
	if err != nil {
		b.t.Fatal(err)
	}
	var out []bt.Event
	testwait.For(b.t, fmt.Sprintf("%d events in %s", n, name), func() bool {
		out = out[:0]
		after := ""
		for {
			p, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: st, After: after, Limit: 1000})
			if err != nil {
				b.t.Fatal(err)
			}
			out = append(out, p.Events...)
			if p.Next == after {
				break
			}
			after = p.Next
		}
		return len(out) >= n
	})
	return out
}

func workerTypes(evs []bt.Event) []string {
	out := []string{}
	for _, e := range evs {
		if strings.HasPrefix(e.Type, "worker.") {
			out = append(out, e.Type)
		}
	}
	return out
}

func (s *suite) testWorkerEventsInProcess(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{WorkerStaleAfter: time.Minute})
	w := b.worker(&backstop.WorkerConfig{ID: "ev-life", Queues: map[string]int{"evq": 1}, HeartbeatInterval: 20 * time.Millisecond},
		map[string]backstop.Handler{"k": backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return nil })})
	b.enqueue(backstop.EnqueueParams{ID: "ev-t", Queue: "evq", Kind: "k"})
	b.waitState("ev-t", backstop.StateSucceeded)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	evs := b.readStream("worker.ev-life", 4) // started, the task's claimed and started, stopped
	eq(t, "worker events", workerTypes(evs), []string{"worker.started", "worker.stopped"})
	started := body(t, evs[0])
	if evs[0].Subject != "ev-life" || started["pid"] == float64(0) || started["host"] == "" || started["remote"] != false ||
		fmt.Sprint(started["queues"]) != "[evq]" {
		t.Fatalf("worker.started: %+v %s", evs[0], evs[0].Body)
	}
	last := evs[len(evs)-1]
	if last.Type != "worker.stopped" || body(t, last)["host"] != started["host"] {
		t.Fatalf("last: %+v %s", last, last.Body)
	}
	// A worker's events are not a task's history.
	if evs, _ := b.c.Events(b.ctx, "ev-life"); len(evs) != 0 {
		t.Fatalf("task history of the worker's id: %+v", evs)
	}
}

func (s *suite) testWorkerEventsRemote(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{WorkerStaleAfter: time.Minute})
	ctx := backstop.WithActor(b.ctx, "tok-worker")
	info, err := remote.New(b.c.Engine()).RegisterWorker(ctx, backstop.WorkerInfo{ID: "rw-ev", Host: "node-a", PID: 77, Queues: []string{"q2", "q1"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.State != store.WorkerActive || info.PID != 77 || info.Host != "node-a" || !info.Remote || fmt.Sprint(info.Queues) != "[q1 q2]" {
		t.Fatalf("registered: %+v", info)
	}
	b.clock.Advance(10 * time.Second)
	beat, err := remote.New(b.c.Engine()).WorkerHeartbeat(ctx, "rw-ev", false)
	if err != nil || !beat.LastSeen.After(info.LastSeen) || beat.State != store.WorkerActive {
		t.Fatalf("heartbeat: %+v %v", beat, err)
	}
	b.clock.Advance(10 * time.Second)
	if d, err := remote.New(b.c.Engine()).WorkerHeartbeat(ctx, "rw-ev", true); err != nil || d.State != store.WorkerStopping {
		t.Fatalf("draining heartbeat: %+v %v", d, err)
	}
	b.clock.Advance(10 * time.Second)
	stopped, err := remote.New(b.c.Engine()).StopWorker(ctx, "rw-ev")
	if err != nil || stopped.State != store.WorkerStopped || stopped.StoppedAt == nil || !stopped.LastSeen.After(beat.LastSeen) {
		t.Fatalf("stop: %+v %v", stopped, err)
	}
	if _, err := remote.New(b.c.Engine()).StopWorker(ctx, "rw-ev"); err != nil { // again: no second event
		t.Fatal(err)
	}
	b.clock.Advance(5 * time.Minute) // a stopped worker is never lost
	if err := backstop.Maintain(b.ctx, b.c); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.New(b.c.Engine()).WorkerHeartbeat(ctx, "nobody", false); !isNotFound(err) {
		t.Fatalf("heartbeat of an unknown worker: %v", err)
	}
	if _, err := remote.New(b.c.Engine()).RegisterWorker(ctx, backstop.WorkerInfo{ID: "x", Queues: nil}); !isInvalid(err) {
		t.Fatalf("register without queues: %v", err)
	}
	evs := b.readStream("worker.rw-ev", 2)
	eq(t, "remote worker events", workerTypes(evs), []string{"worker.started", "worker.stopped"})
	for _, e := range evs {
		if e.Actor != "tok-worker" || body(t, e)["host"] != "node-a" {
			t.Fatalf("event %s: actor %q body %s", e.Type, e.Actor, e.Body)
		}
	}
	eq(t, "pid", body(t, evs[0])["pid"], any(float64(77)))
	eq(t, "remote", body(t, evs[0])["remote"], any(true))
}

// testWorkerHeartbeatLost: a worker that stops being seen gets one
// worker.heartbeat_lost however often maintenance runs; seen again, a
// later silence gets another.
func (s *suite) testWorkerHeartbeatLost(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{WorkerStaleAfter: time.Minute})
	b.clock.freeze()
	if err := b.store.RegisterWorker(b.ctx, store.WorkerInfo{ID: "lost-1", Host: "node-l", Queues: []string{"q"}, StartedAt: b.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	maintain := func() {
		t.Helper()
		for range 3 {
			if err := backstop.Maintain(b.ctx, b.c); err != nil {
				t.Fatal(err)
			}
		}
	}
	maintain() // not stale yet
	b.clock.Advance(61 * time.Second)
	maintain()
	if ids, err := b.store.MarkLostWorkers(b.ctx, b.clock.Now(), time.Minute); err != nil || len(ids) != 0 {
		t.Fatalf("marked again: %v %v", ids, err)
	}
	if err := b.store.TouchWorkers(b.ctx, []string{"lost-1"}, b.clock.Now()); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(30 * time.Second)
	maintain() // seen 30s ago: not lost
	b.clock.Advance(31 * time.Second)
	maintain()
	evs := b.readStream("worker.lost-1", 3)
	eq(t, "events", workerTypes(evs), []string{"worker.started", "worker.heartbeat_lost", "worker.heartbeat_lost"})
	lost := body(t, evs[1])
	if lost["host"] != "node-l" || lost["stale_after_ms"] != float64(60000) || lost["last_seen"] == "" {
		t.Fatalf("heartbeat_lost body: %s", evs[1].Body)
	}
	w, err := b.c.Worker(b.ctx, "lost-1")
	if err != nil || w.State != store.WorkerStale {
		t.Fatalf("worker: %+v %v", w, err)
	}
}

// testNodeExecutionStreams: node.<host> holds the worker events of the
// host's workers and every event of the attempts they ran (whichever
// worker ran the task's other attempts); execution.<id> one attempt's.
func (s *suite) testNodeExecutionStreams(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{WorkerStaleAfter: time.Minute})
	for _, w := range []store.WorkerInfo{{ID: "n1", Host: "node-a"}, {ID: "n2", Host: "node-b"}, {ID: "n3", Host: "node-a"}} {
		w.Queues, w.StartedAt = []string{"nq"}, b.clock.Now()
		if err := b.store.RegisterWorker(b.ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	claimBy := func(worker string) *bt.Task {
		t.Helper()
		ts, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "nq", WorkerID: worker, Max: 1, Now: b.clock.Now(), Lease: time.Minute})
		if err != nil || len(ts) != 1 {
			t.Fatalf("claim by %s: %v %v", worker, ts, err)
		}
		return ts[0]
	}
	succeed := func(task *bt.Task) {
		settle(t, b, store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeSucceeded,
			FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
	}
	b.enqueue(backstop.EnqueueParams{ID: "na", Queue: "nq", Kind: "k"})
	a := claimBy("n1")
	succeed(a)
	b.enqueue(backstop.EnqueueParams{ID: "nb", Queue: "nq", Kind: "k"})
	b1 := claimBy("n2")
	settle(t, b, store.Settlement{TaskID: "nb", ExecutionID: b1.ExecutionID, Outcome: backstop.OutcomeTransientError, Error: "boom",
		FinishedAt: b.clock.Now(), State: backstop.StatePending, RunAt: b.clock.Now()})
	b2 := claimBy("n3")
	if _, err := b.store.Heartbeat(b.ctx, []store.Beat{{TaskID: "nb", ExecutionID: b2.ExecutionID, Progress: &bt.Progress{Total: 2, Completed: 1}}},
		b.clock.Now(), b.clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	b.enqueue(backstop.EnqueueParams{ID: "nc", Queue: "nq", Kind: "k"})
	c := claimBy("n1") // running: its task row names the worker
	succeed(b2)
	if err := b.store.SetWorkerState(b.ctx, "n2", store.WorkerStopped, b.clock.Now()); err != nil {
		t.Fatal(err)
	}

	var all []bt.Event
	testwait.For(t, "the log", func() bool {
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		all = p.Events
		return len(all) >= 19
	})
	byStream := func(name string) []string {
		out := []string{}
		for _, e := range b.readStream(name, 1) {
			out = append(out, e.Subject+":"+e.Type)
		}
		return out
	}
	eq(t, "node.node-a", byStream("node.node-a"), []string{
		"n1:worker.started", "n3:worker.started",
		"na:task.claimed", "na:task.started", "na:task.succeeded",
		"nb:task.claimed", "nb:task.progress", "nc:task.claimed",
		"nb:task.started", "nb:task.succeeded"})
	eq(t, "node.node-b", byStream("node.node-b"), []string{
		"n2:worker.started", "nb:task.claimed", "nb:task.started", "nb:task.failed", "n2:worker.stopped"})
	eq(t, "execution of b's first attempt", byStream("execution."+b1.ExecutionID), []string{
		"nb:task.claimed", "nb:task.started", "nb:task.failed"})
	eq(t, "execution of c", byStream("execution."+c.ExecutionID), []string{"nc:task.claimed"})
	if got := b.readStream("node.nowhere", 0); len(got) != 0 {
		t.Fatalf("node.nowhere: %v", got)
	}
	checkStreamsPaging(t, b, all, []string{"node.node-a", "node.node-b", "execution." + b2.ExecutionID, "worker.n1"})
}

func isNotFound(err error) bool { return err != nil && strings.Contains(err.Error(), "not found") }

func isInvalid(err error) bool { return errors.Is(err, backstop.ErrInvalid) }
