package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// testQueues: a paused queue is not claimed (also with a kind filter),
// other queues are unaffected, pausing is idempotent, and resuming makes
// the queue claimable again; runs summarise tasks sharing a run_id.
func (s *suite) testQueues(t *testing.T) {
	t.Run("PauseResume", s.testPauseResume)
	t.Run("PauseWritesItsEvent", s.testPauseWritesItsEvent)
	t.Run("Runs", s.testRuns)
}

func (s *suite) testPauseResume(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	for i := 0; i < 3; i++ {
		b.enqueue(backstop.EnqueueParams{Queue: "paused", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{Queue: "open", Kind: "k"})
	}
	st, changed, err := b.c.PauseQueue(b.ctx, "paused", "ops@test")
	if err != nil || !changed || st.Name != "paused" || st.PausedBy != "ops@test" || st.PausedAt.IsZero() {
		t.Fatalf("pause: %+v %v %v", st, changed, err)
	}
	again, changed, err := b.c.PauseQueue(b.ctx, "paused", "someone-else")
	if err != nil || changed || !again.PausedAt.Equal(st.PausedAt) || again.PausedBy != "ops@test" {
		t.Fatalf("pause twice: %+v %v %v, want the first pause unchanged", again, changed, err)
	}
	if got := claim(t, b, "paused", 10); len(got) != 0 {
		t.Fatalf("claimed %d tasks from a paused queue", len(got))
	}
	ts, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "paused", Kinds: []string{"k"}, WorkerID: "w", Max: 10,
		Now: b.clock.Now(), Lease: time.Minute})
	if err != nil || len(ts) != 0 {
		t.Fatalf("claimed %d tasks (kinds filter) from a paused queue: %v", len(ts), err)
	}
	if got := claim(t, b, "open", 1); len(got) != 1 {
		t.Fatalf("the other queue: claimed %d, want 1", len(got))
	}
	ps, err := b.c.PausedQueues(b.ctx)
	if err != nil || len(ps) != 1 || ps[0].Name != "paused" || !ps[0].PausedAt.Equal(st.PausedAt) {
		t.Fatalf("paused queues: %+v %v", ps, err)
	}
	if _, _, err := b.c.PauseQueue(b.ctx, "bad queue!", ""); err == nil {
		t.Fatal("pausing an invalid queue name succeeded")
	}

	changed, err = b.c.ResumeQueue(b.ctx, "paused", "ops@test")
	if err != nil || !changed {
		t.Fatalf("resume: %v %v", changed, err)
	}
	if changed, err := b.c.ResumeQueue(b.ctx, "paused", "ops@test"); err != nil || changed {
		t.Fatalf("resume twice: %v %v, want unchanged", changed, err)
	}
	if got := claim(t, b, "paused", 10); len(got) != 3 {
		t.Fatalf("after resume: claimed %d, want 3", len(got))
	}
	if ps, err := b.c.PausedQueues(b.ctx); err != nil || len(ps) != 0 {
		t.Fatalf("paused queues after resume: %+v %v", ps, err)
	}
}

func (s *suite) testRuns(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	run := map[string]string{"run_id": "r-1"}
	for i := 0; i < 4; i++ {
		b.enqueue(backstop.EnqueueParams{Queue: "runs", Kind: "k", Attributes: run,
			Progress: backstop.Progress{Total: 10, Completed: i}})
	}
	b.enqueue(backstop.EnqueueParams{Queue: "runs", Kind: "k", Attributes: map[string]string{"run_id": "r-2"}})
	claimAndSucceed(t, b, "runs", 1) // the oldest: one of r-1
	r, err := b.c.Run(b.ctx, "r-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 4 || r.Counts[backstop.StateSucceeded] != 1 || r.Counts[backstop.StatePending] != 3 ||
		r.Progress.Total != 40 || r.Progress.Completed != 6 || r.Finished || r.FirstActivity.IsZero() ||
		r.LastActivity.Before(r.FirstActivity) || len(r.Counts) != 7 {
		t.Fatalf("run: %+v", r)
	}
	tasks, err := b.c.RunTasks(b.ctx, "r-1", backstop.ListParams{Limit: 2})
	if err != nil || len(tasks) != 2 {
		t.Fatalf("run tasks: %d %v", len(tasks), err)
	}
	if _, err := b.c.Run(b.ctx, "nope"); !errors.Is(err, backstop.ErrNotFound) {
		t.Fatalf("unknown run: %v, want ErrNotFound", err)
	}
}

// testPauseWritesItsEvent: a pause or resume and its audit event commit
// together: an event the log refuses rolls the pause back, and a pause or
// resume that changes nothing writes none.
func (s *suite) testPauseWritesItsEvent(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	now := b.clock.Now()
	if _, _, err := b.store.PauseQueue(b.ctx, "atomic", "ops", now, bt.Event{Type: store.EventQueuePaused}); err == nil {
		t.Fatal("a pause whose event has no time (refused by the log) succeeded")
	}
	if ps, err := b.store.PausedQueues(b.ctx); err != nil || len(ps) != 0 {
		t.Fatalf("the refused event's pause is there: %+v %v", ps, err)
	}
	ev := func(typ string) bt.Event { return store.AuditEvent(now, typ, "atomic", "ops", "", nil) }
	count := func(typ string) int {
		t.Helper()
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: store.Stream{Kind: store.StreamType, Value: typ}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Events)
	}
	for range 2 {
		if _, _, err := b.store.PauseQueue(b.ctx, "atomic", "ops", now, ev(store.EventQueuePaused)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := b.store.ResumeQueue(b.ctx, "atomic", ev(store.EventQueueResumed)); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, "the pause's and the resume's events", func() bool {
		return count(store.EventQueuePaused) == 1 && count(store.EventQueueResumed) == 1
	})
	if p, r := count(store.EventQueuePaused), count(store.EventQueueResumed); p != 1 || r != 1 {
		t.Fatalf("%d queue.paused and %d queue.resumed events, want one each", p, r)
	}
}
