package pgstore_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Migration 00048 on a database written by the version before it (00043):
// its waiting tasks of merge keys (one debounced by that version, one
// spilled) are debounced through the new functions, which move a waiting
// task's run time and state, and leave a finished task of the key alone
// (the enqueue inserts a new one, its settings written by the other
// function), and a task's idempotency window is opened by the third.
// Rolled back, the functions are gone and the rows stay; applied again,
// debouncing works again.
func TestDebounceFunctionMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storeAt(t, 43)
	merge := func(_ string, _ json.RawMessage, _ int, in json.RawMessage) (json.RawMessage, error) { return in, nil }
	opts := store.EnqueueOpts{InlineLimit: 64, Merge: merge}
	keyed := func(key string, state bt.State, runAt time.Time, payload string) *bt.Task {
		tk := newTask("dm")
		tk.MergeKey, tk.State, tk.RunAt, tk.Payload = key, state, runAt, json.RawMessage(payload)
		return tk
	}
	a := keyed("a", bt.StateScheduled, t0.Add(5*time.Second), `{"v":0}`)
	b := keyed("b", bt.StateScheduled, t0.Add(time.Hour), `{"big":"`+strings.Repeat("x", 100)+`"}`)
	c := keyed("c", bt.StatePending, t0, `{"v":0}`)
	enqueue(t, s, opts, a, b, c)
	// a was debounced by the version before.
	if _, err := s.Pool().Exec(ctx, `UPDATE backstop_tasks SET debounce_for_us = 5000000 WHERE id = $1`, a.ID); err != nil {
		t.Fatal(err)
	}
	done := claim(t, s, "dm", 10, t0)
	if len(done) != 1 || done[0].ID != c.ID {
		t.Fatalf("claimed %v, want only %s", ids(done), c.ID)
	}
	settle(t, s, store.Settlement{TaskID: c.ID, ExecutionID: done[0].ExecutionID, Outcome: bt.OutcomeSucceeded,
		FinishedAt: t0, State: bt.StateSucceeded})

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	debounce := func(key string, runAt time.Time, payload string, d store.Debounce) store.EnqueueResult {
		t.Helper()
		tk := keyed(key, bt.StateScheduled, runAt, payload)
		if !runAt.After(t0) {
			tk.State = bt.StatePending
		}
		o := opts
		o.Debounce = []store.Debounce{d}
		return enqueue(t, s, o, tk)[0]
	}
	check := func(what string, r store.EnqueueResult, id string, merged bool, state bt.State, runAt time.Time, payload string) {
		t.Helper()
		got, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Merged != merged || r.Task.ID != id || got.State != state || !got.RunAt.Equal(runAt) || string(got.Payload) != payload {
			t.Fatalf("%s: merged %v into %s, %s at %v, payload %s; want merged %v into %s, %s at %v, payload %s", what,
				r.Merged, r.Task.ID, got.State, got.RunAt, got.Payload, merged, id, state, runAt, payload)
		}
	}
	r := debounce("a", t0.Add(10*time.Second), `{"v":1}`, store.Debounce{Debounced: true, For: 10 * time.Second})
	check("a debounced task of the version before", r, a.ID, true, bt.StateScheduled, t0.Add(10*time.Second), `{"v":1}`)
	if d, err := s.TaskDebounce(ctx, a.ID); err != nil || d == nil || d.For != bt.Duration(10*time.Second) {
		t.Fatalf("a's debounce: %+v (%v)", d, err)
	}
	// Capped by its max wait at its creation, b is due: pending, its
	// spilled payload now inline.
	r = debounce("b", t0.Add(time.Hour), `{"v":2}`, store.Debounce{Debounced: true, For: time.Hour, MaxWait: time.Nanosecond})
	check("a spilled task of the version before", r, b.ID, true, bt.StatePending, t0.Add(time.Nanosecond).Truncate(time.Microsecond), `{"v":2}`)
	r = debounce("c", t0.Add(time.Minute), `{"v":3}`, store.Debounce{Debounced: true, For: time.Minute, MaxWait: time.Hour})
	if r.Merged || r.Task.ID == c.ID {
		t.Fatalf("the finished task of key c took a debounce: %+v", r)
	}
	check("a new task of a finished key", r, r.Task.ID, false, bt.StateScheduled, t0.Add(time.Minute), `{"v":3}`)
	if d, err := s.TaskDebounce(ctx, r.Task.ID); err != nil || d == nil || d.MaxWaitUntil == nil || !d.MaxWaitUntil.Equal(t0.Add(time.Hour)) {
		t.Fatalf("the new task's debounce: %+v (%v)", d, err)
	}
	if got, err := s.Get(ctx, c.ID); err != nil || got.State != bt.StateSucceeded {
		t.Fatalf("the finished task: %+v (%v)", got, err)
	}

	// An idempotency key's window is opened through its function too.
	w := newTask("dm")
	until := t0.Add(time.Hour)
	w.IdempotencyKey, w.UniqueUntil = "w", &until
	enqueue(t, s, opts, w)
	if got, err := s.Get(ctx, w.ID); err != nil || got.UniqueUntil == nil || !got.UniqueUntil.Equal(until) {
		t.Fatalf("a windowed task: %+v (%v)", got, err)
	}

	if err := s.MigrateDownTo(ctx, 43); err != nil {
		t.Fatal(err)
	}
	var fns int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname IN ('backstop_debounce_merge', 'backstop_debounce_settings', 'backstop_unique_window')
		AND pronamespace = current_schema()::regnamespace`).Scan(&fns); err != nil || fns != 0 {
		t.Fatalf("rolled back: %d of the functions (%v), want none", fns, err)
	}
	if got, err := s.Get(ctx, a.ID); err != nil || string(got.Payload) != `{"v":1}` {
		t.Fatalf("rolled back: a is %+v (%v)", got, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r = debounce("a", t0.Add(20*time.Second), `{"v":4}`, store.Debounce{Debounced: true, For: 20 * time.Second})
	check("migrated again", r, a.ID, true, bt.StateScheduled, t0.Add(20*time.Second), `{"v":4}`)
}
