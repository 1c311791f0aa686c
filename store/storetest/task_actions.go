package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// testTaskActions: an operator's action on live tasks changes each task
// its state allows, with its event (actor, reason, job id) and its outcome
// on the job in the same transaction; a task judged by a dry run while
// pending that started running since is never canceled or deleted behind
// its worker's back: a cancel asks its worker to stop (cancel_requested),
// a delete skips it, and each outcome says so.
func (s *suite) testTaskActions(t *testing.T) {
	setup := func(t *testing.T) (*bundle, string) {
		b := s.setup(t, nil)
		now := b.clock.Now()
		rec, _, err := b.store.StartRedrive(b.ctx, store.Redrive{ID: "job-" + t.Name()[len(t.Name())-3:], Kind: store.JobTaskDelete,
			FilterKey: t.Name(), Filter: json.RawMessage(`{}`), Snapshot: now, StartedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		if rec.Kind != store.JobTaskDelete {
			t.Fatalf("kind %q", rec.Kind)
		}
		return b, rec.ID
	}
	apply := func(t *testing.T, b *bundle, job, action string, prio int, ids ...string) store.TaskActionResult {
		t.Helper()
		res, err := b.store.ApplyTaskAction(b.ctx, store.TaskActionBatch{Action: action, IDs: ids, Priority: prio,
			Now: b.clock.Now(), Actor: "ops", Reason: "bad batch", JobID: job})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	outcomes := func(res store.TaskActionResult) map[string]string {
		m := map[string]string{}
		for _, it := range res.Items {
			m[it.TaskID] = it.Outcome
		}
		return m
	}
	lastEvent := func(t *testing.T, b *bundle, id string) backstop.Event {
		t.Helper()
		evs, err := b.c.Events(b.ctx, id)
		if err != nil || len(evs) == 0 {
			t.Fatalf("events of %s: %v %v", id, evs, err)
		}
		return evs[len(evs)-1]
	}

	t.Run("DeleteSkipsRunning", func(t *testing.T) {
		t.Parallel()
		b, job := setup(t)
		b.enqueue(backstop.EnqueueParams{ID: "del-a", Queue: "q", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{ID: "del-b", Queue: "q", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{ID: "del-c", Queue: "q2", Kind: "k", Delay: time.Hour})
		// del-a was pending when listed, and started running since.
		if got := claim(t, b, "q", 1); len(got) != 1 || got[0].ID != "del-a" {
			t.Fatalf("claimed %v", got)
		}
		res := apply(t, b, job, store.JobTaskDelete, 0, "del-a", "del-b", "del-c", "del-none")
		eq(t, "outcomes", outcomes(res), map[string]string{"del-a": store.OutcomeSkipped, "del-b": store.OutcomeDeleted,
			"del-c": store.OutcomeDeleted, "del-none": store.OutcomeSkipped})
		eq(t, "changed/skipped", [2]int{res.Changed, res.Skipped}, [2]int{2, 2})
		if got := b.get("del-a"); got.State != backstop.StateRunning {
			t.Fatalf("del-a: %s", got.State)
		}
		for _, id := range []string{"del-b", "del-c"} {
			if _, err := b.c.Get(b.ctx, id); !errors.Is(err, backstop.ErrNotFound) {
				t.Fatalf("%s still there: %v", id, err)
			}
			e := lastEvent(t, b, id)
			var body map[string]any
			_ = json.Unmarshal(e.Body, &body)
			if e.Type != store.EventTaskDeleted || e.Actor != "ops" || body["reason"] != "bad batch" || body["job_id"] != job {
				t.Fatalf("%s's last event: %+v %s", id, e, e.Body)
			}
		}
		rec, err := b.store.GetRedrive(b.ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "record", [3]any{rec.Cursor, rec.Replayed, rec.Failed}, [3]any{"del-none", 2, 2})
		items, err := b.store.RedriveItems(b.ctx, store.RedriveItemsQuery{RedriveID: job, Outcomes: []string{store.OutcomeSkipped}})
		if err != nil || len(items) != 2 || items[0].TaskID != "del-a" || items[0].Detail == "" {
			t.Fatalf("skipped items: %+v %v", items, err)
		}
	})

	t.Run("CancelRequestsRunning", func(t *testing.T) {
		t.Parallel()
		b, job := setup(t)
		b.enqueue(backstop.EnqueueParams{ID: "can-a", Queue: "q", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{ID: "can-b", Queue: "q", Kind: "k"})
		claim(t, b, "q", 1)
		res := apply(t, b, job, store.JobTaskCancel, 0, "can-a", "can-b")
		eq(t, "outcomes", outcomes(res), map[string]string{"can-a": store.OutcomeCancelRequested, "can-b": store.OutcomeCanceled})
		eq(t, "states", [2]backstop.State{b.get("can-a").State, b.get("can-b").State},
			[2]backstop.State{backstop.StateRunning, backstop.StateCanceled})
		eq(t, "events", [2]string{lastEvent(t, b, "can-a").Type, lastEvent(t, b, "can-b").Type},
			[2]string{store.EventCancelRequest, store.EventCanceled})
		// Again: nothing is changed twice.
		res = apply(t, b, job, store.JobTaskCancel, 0, "can-b")
		eq(t, "again", outcomes(res), map[string]string{"can-b": store.OutcomeSkipped})
	})

	t.Run("RunNowAndPriority", func(t *testing.T) {
		t.Parallel()
		b, job := setup(t)
		b.enqueue(backstop.EnqueueParams{ID: "rn-a", Queue: "q", Kind: "k", Delay: time.Hour})
		b.enqueue(backstop.EnqueueParams{ID: "rn-b", Queue: "q", Kind: "k", Delay: time.Hour, Priority: 1})
		res := apply(t, b, job, store.JobTaskRunNow, 0, "rn-a")
		eq(t, "run now", outcomes(res), map[string]string{"rn-a": store.OutcomeRunNow})
		got := claim(t, b, "q", 5)
		if len(got) != 1 || got[0].ID != "rn-a" {
			t.Fatalf("claimable after run now: %v", got)
		}
		res = apply(t, b, job, store.JobTaskReprioritize, 7, "rn-a", "rn-b")
		eq(t, "reprioritize", outcomes(res), map[string]string{"rn-a": store.OutcomeSkipped, "rn-b": store.OutcomeReprioritized})
		eq(t, "priority", b.get("rn-b").Priority, 7)
		e := lastEvent(t, b, "rn-b")
		var body map[string]any
		_ = json.Unmarshal(e.Body, &body)
		if e.Type != store.EventTaskReprioritized || body["priority"] != 7.0 || body["from_priority"] != 1.0 {
			t.Fatalf("event %+v %s", e, e.Body)
		}
	})
}
