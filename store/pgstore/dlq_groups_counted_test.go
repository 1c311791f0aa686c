package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// killed is a death of each task (permanent error text err).
func killed(err string, at time.Time, tasks ...*bt.Task) []store.Settlement {
	ss := make([]store.Settlement, len(tasks))
	for i, tk := range tasks {
		ss[i] = store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
			Error: err, FinishedAt: at, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
	}
	return ss
}

// redriveQueue replays every open dead letter of queue as pending (one
// redrive, batches of limit).
func redriveQueue(t *testing.T, s *pgstore.Store, id, queue string, at time.Time) int {
	t.Helper()
	ctx := t.Context()
	rec, _, err := s.StartRedrive(ctx, store.Redrive{ID: id, Kind: store.JobRedrive, FilterKey: id, Filter: json.RawMessage(`{}`),
		Snapshot: at, StartedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	b := store.RedriveBatch{RedriveID: rec.ID, Filter: store.ListFilter{Queue: queue}, Snapshot: at, Limit: 7,
		RunAt: at, State: bt.StatePending, Now: at, Actor: "test"}
	n := 0
	for {
		res, err := s.RedriveBatch(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		n += res.Replayed
		if res.LastID == "" || res.Replayed == 0 {
			return n
		}
		b.AfterID = res.LastID
	}
}

// checkKept: the task counts and the dead letters' groups of every kept
// filter equal the rows'.
func checkKept(t *testing.T, s *pgstore.Store, what string) {
	t.Helper()
	checkCounts(t, s, what)
	checkGroups(t, s, what)
}

// The claim and the success settle, which count themselves and write no
// dead letter, do not touch the dead letters' groups: with the groups'
// delta table locked by another session they still run, and so does a
// batch enqueue by COPY, while a settle that kills a task waits for the
// lock (the groups' trigger appends its dead letter).
func TestCountedStatementsLeaveDLQGroupsAlone(t *testing.T) {
	b := setup(t)
	s, ctx := b.store, t.Context()
	var tasks []*bt.Task
	for i := range 12 {
		tk := newTask("lg")
		tk.ID = fmt.Sprintf("lg-%02d", i)
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	// Dead letters with groups already there, and a redriven one pending.
	settle(t, s, killed("before", t0.Add(time.Minute), claim(t, s, "lg", 3, t0.Add(time.Minute))...)...)
	if n := redriveQueue(t, s, "rd-lg", "lg", t0.Add(2*time.Minute)); n != 3 {
		t.Fatalf("redrove %d, want 3", n)
	}

	lock, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE backstop_dlq_group_count_deltas IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// A statement that reached the locked table would wait until the lock
	// is released; the deadline turns that into an error.
	within := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 30*time.Second) }
	c, cancel := within()
	got, err := s.Claim(c, store.ClaimParams{Queue: "lg", WorkerID: "w1", Max: 6, Now: t0.Add(3 * time.Minute), Lease: time.Minute})
	cancel()
	if err != nil || len(got) != 6 {
		t.Fatalf("claim beside the locked groups' deltas: %d tasks, %v; want 6 (the claim reads no dead letter)", len(got), err)
	}
	c, cancel = within()
	_, err = s.Settle(c, succeeded(got[:4]...))
	cancel()
	if err != nil {
		t.Fatalf("success settle beside the locked groups' deltas: %v; want it to run (it writes no dead letter)", err)
	}
	c, cancel = within()
	_, err = s.Enqueue(c, plainBatch("lgc", 20), store.EnqueueOpts{})
	cancel()
	if err != nil {
		t.Fatalf("copied batch beside the locked groups' deltas: %v", err)
	}
	// The lock holds: a death is counted into the groups, so it waits.
	c, cancel = context.WithTimeout(ctx, 2*time.Second)
	_, err = s.Settle(c, killed("during", t0.Add(3*time.Minute), got[4]))
	cancel()
	if err == nil {
		t.Fatal("a death settled while the groups' deltas were locked: the lock did not hold, the test proves nothing")
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	settle(t, s, killed("after", t0.Add(4*time.Minute), got[4:]...)...)
	checkKept(t, s, "after the lock")
	if d, err := s.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile: %+v %v, want nothing to correct", d, err)
	}
}

// Migration 00064 on a database holding tasks, dead letters with groups
// and tasks running: the task counts and the dead letters' groups stay
// exact through claims, successes, deaths and redrives (the redriven
// tasks claimed and succeeded under the statements' own count), down to
// 63 and up again, with nothing to reconcile.
func TestCountedUpdatesSkipDLQGroupsMigration(t *testing.T) {
	s := storeAt(t, 63)
	seedCounts(t, s, 300) // dead letters of x and y with a group ("boom")
	running := claim(t, s, "z", 12, t0.Add(time.Minute))
	checkKept(t, s, "at 63")
	at := t0.Add(2 * time.Minute)
	round := func(what string, q string) {
		t.Helper()
		at = at.Add(time.Minute)
		got := claim(t, s, q, 9, at)
		checkKept(t, s, what+": claimed")
		settle(t, s, append(succeeded(got[:5]...), killed("round "+what, at, got[5:7]...)...)...)
		settle(t, s, succeeded(got[7:]...)...)
		checkKept(t, s, what+": settled and killed")
		if n := redriveQueue(t, s, "rd-"+what, q, at); n == 0 {
			t.Fatalf("%s: nothing redriven", what)
		}
		checkKept(t, s, what+": redriven")
		settle(t, s, succeeded(claim(t, s, q, 1000, at.Add(time.Second))...)...)
		checkKept(t, s, what+": redriven and succeeded")
	}
	step := func(what string, to int64, down bool) {
		t.Helper()
		var err error
		if down {
			err = s.MigrateDownTo(t.Context(), to)
		} else {
			err = s.MigrateTo(t.Context(), to)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var v int64
		if err := s.Pool().QueryRow(t.Context(), `SELECT max(version_id) FROM backstop_schema_version WHERE is_applied`).Scan(&v); err != nil || v != to {
			t.Fatalf("%s: schema at %d (%v), want %d", what, v, err, to)
		}
		checkKept(t, s, what)
	}
	step("at64", 64, false)
	settle(t, s, append(succeeded(running[:4]...), killed("claimed before", at, running[4:6]...)...)...)
	checkKept(t, s, "claimed before 64, settled after")
	round("x64", "x")
	step("down63", 63, true)
	settle(t, s, succeeded(running[6:9]...)...)
	round("y63", "y")
	step("up64", 64, false)
	settle(t, s, killed("claimed before, up again", at, running[9:]...)...)
	round("z64", "z")
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d, err := s.ReconcileCounts(t.Context()); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile: %+v %v, want nothing to correct", d, err)
	}
}
