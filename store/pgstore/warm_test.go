package pgstore_test

import (
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Warm opens the connections asked for (at most the pool's) and runs on
// each a claim that takes nothing: the queue's tasks stay pending and no
// event is written.
func TestWarmOpensConnectionsAndClaimsNothing(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	s := storeWithPool(t, b, 8)
	tasks := []*bt.Task{newTask("warm"), newTask("warm"), newTask("warm")}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	events := func() (n int64) {
		t.Helper()
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM backstop_events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := events()
	if got := s.Pool().Stat().TotalConns(); got >= 6 {
		t.Fatalf("%d connections open before Warm", got)
	}
	if err := s.Warm(ctx, "warm", 6); err != nil {
		t.Fatal(err)
	}
	if got := s.Pool().Stat().TotalConns(); got < 6 {
		t.Errorf("%d connections open after Warm(6)", got)
	}
	if err := s.Warm(ctx, "warm", 50); err != nil {
		t.Fatal(err)
	}
	if got := s.Pool().Stat().TotalConns(); got != 8 {
		t.Errorf("%d connections open after Warm(50) on a pool of 8", got)
	}
	for _, tk := range tasks {
		if got := get(t, s, tk.ID); got.State != bt.StatePending || got.Attempt != 0 {
			t.Errorf("task %s is %s (attempt %d) after Warm", tk.ID, got.State, got.Attempt)
		}
	}
	if after := events(); after != before {
		t.Errorf("Warm wrote %d events", after-before)
	}
	if got := claim(t, s, "warm", 10, t0); len(got) != len(tasks) {
		t.Errorf("claimed %d after Warm, want %d", len(got), len(tasks))
	}
}
