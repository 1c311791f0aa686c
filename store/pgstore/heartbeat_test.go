package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// A batch heartbeat does not wait for a task row another transaction holds
// (a settle of that attempt in flight): it answers the beat from its
// snapshot (held, not lost) and leaves that lease alone; the other leases
// are extended. A single beat still waits (the remote protocol tells the
// worker its new expiry).
func TestHeartbeatSkipsLockedRows(t *testing.T) {
	b := setup(t)
	s := b.store
	a, c := newTask("hb"), newTask("hb")
	enqueue(t, s, store.EnqueueOpts{}, a, c)
	tasks := claim(t, s, "hb", 2, t0)
	if len(tasks) != 2 {
		t.Fatalf("claimed %d", len(tasks))
	}
	exec := map[string]string{}
	for _, task := range tasks {
		exec[task.ID] = task.ExecutionID
	}
	before := get(t, s, a.ID).LeaseExpiresAt

	tx, err := s.Pool().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM backstop_tasks WHERE id = $1 FOR UPDATE`, a.ID); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	now := t0.Add(time.Second)
	until := now.Add(time.Hour)
	res, err := s.Heartbeat(ctx, []store.Beat{{TaskID: a.ID, ExecutionID: exec[a.ID]}, {TaskID: c.ID, ExecutionID: exec[c.ID]}}, now, until)
	if err != nil {
		t.Fatalf("heartbeat waited for the held row or failed: %v", err)
	}
	if res[0].Lost || res[1].Lost {
		t.Fatalf("results %+v: both leases are still these executions'", res)
	}
	if got := get(t, s, c.ID).LeaseExpiresAt; got == nil || !got.Equal(until) {
		t.Fatalf("free row's lease %v, want extended to %v", got, until)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, a.ID).LeaseExpiresAt; got == nil || !got.Equal(*before) {
		t.Fatalf("held row's lease %v, want unchanged %v", got, before)
	}

	// A lease settled meanwhile is lost, skipped or not.
	settle(t, s, store.Settlement{TaskID: a.ID, ExecutionID: exec[a.ID], Outcome: "succeeded", FinishedAt: now, State: "succeeded"})
	res, err = s.Heartbeat(ctx, []store.Beat{{TaskID: a.ID, ExecutionID: exec[a.ID]}, {TaskID: c.ID, ExecutionID: exec[c.ID]}}, now, until)
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Lost || res[1].Lost {
		t.Fatalf("after a's settlement: %+v, want a lost, c held", res)
	}
}
