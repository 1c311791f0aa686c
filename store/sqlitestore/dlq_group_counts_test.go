package sqlitestore

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Migration 00052 on a database holding dead letters: the kept groups
// start as their count and follow the writes after it (a death, a
// discard, a delete, a queue moved, an error rewritten, a replay); the
// answer is read from them (a count made wrong behind the triggers' back
// shows, until a reconciliation counts them again); down and up again.
func TestDLQGroupCountsMigration(t *testing.T) {
	ctx := t.Context()
	s, p := storeAt(t, 50)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var tasks []*bt.Task
	for i := range 60 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("dg-%02d", i), Queue: []string{"x", "y", "z"}[i%3], Kind: "k",
			State: bt.StatePending, MaxAttempts: 1, RunAt: at, CreatedAt: at, UpdatedAt: at})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	kill := func(queue string, n int, errs ...string) {
		t.Helper()
		killDead(t, s, queue, n, at.Add(time.Hour), at, errs...)
	}
	kill("x", 12, "boom", "timeout")
	kill("y", 9, "boom", "")
	if _, err := p.UpTo(ctx, 52); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		checkGroupsAgainstRows(t, s, what, at.Add(1000*time.Hour),
			store.ListFilter{}, store.ListFilter{DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
			store.ListFilter{Queue: "x", DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
			store.ListFilter{Queue: "z"}, store.ListFilter{DLQStatuses: []bt.DLQStatus{bt.DLQDiscarded, bt.DLQResolved}})
	}
	check("migrated")
	kill("z", 6, "refused")
	for _, q := range []string{
		`UPDATE backstop_tasks SET dlq_status = 'discarded' WHERE id IN (SELECT id FROM backstop_tasks WHERE state = 'dead' AND queue = 'x' ORDER BY id LIMIT 5)`,
		`DELETE FROM backstop_tasks WHERE id IN (SELECT id FROM backstop_tasks WHERE state = 'dead' AND queue = 'y' ORDER BY id LIMIT 2)`,
		`UPDATE backstop_tasks SET queue = 'z' WHERE id IN (SELECT id FROM backstop_tasks WHERE state = 'dead' AND queue = 'y' ORDER BY id LIMIT 2)`,
		`UPDATE backstop_tasks SET last_error = 'rewritten' WHERE id IN (SELECT id FROM backstop_tasks WHERE state = 'dead' AND queue = 'z' ORDER BY id LIMIT 2)`,
		`UPDATE backstop_tasks SET state = 'pending', dlq_status = NULL WHERE id IN (SELECT id FROM backstop_tasks WHERE state = 'dead' AND queue = 'x' AND dlq_status = 'open' ORDER BY id LIMIT 3)`,
	} {
		if _, err := s.w.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	check("written after")
	before, err := s.DLQGroups(ctx, store.ListFilter{}, 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `UPDATE backstop_dlq_group_counts SET n = n + 1000 WHERE queue = 'x' AND dlq_status = 'open'`); err != nil {
		t.Fatal(err)
	}
	after, err := s.DLQGroups(ctx, store.ListFilter{}, 20)
	if err != nil || after.Total <= before.Total+1000 {
		t.Fatalf("kept counts raised by 1000 a group: total %d → %d (%v), want the kept counts read", before.Total, after.Total, err)
	}
	if d, err := s.ReconcileCounts(ctx); err != nil || d.Groups == 0 || d.Tasks < 1000 {
		t.Fatalf("reconcile: %+v %v, want the raised groups corrected", d, err)
	}
	check("reconciled")
	if d, err := s.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile again: %+v %v", d, err)
	}
	if _, err := p.DownTo(ctx, 50); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 52); err != nil {
		t.Fatal(err)
	}
	check("applied again")
}

// killDead claims n tasks of queue at claimAt and settles them dead
// (permanent error) at finishedAt, their errors taken from errs in turn.
func killDead(t *testing.T, s *Store, queue string, n int, claimAt, finishedAt time.Time, errs ...string) {
	t.Helper()
	ctx := t.Context()
	got, err := s.Claim(ctx, store.ClaimParams{Queue: queue, WorkerID: "w", Max: n, Now: claimAt, Lease: time.Minute})
	if err != nil || len(got) != n {
		t.Fatalf("claim: %d %v", len(got), err)
	}
	var ss []store.Settlement
	for i, tk := range got {
		ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
			Error: errs[i%len(errs)], FinishedAt: finishedAt, State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
	}
	if _, err := s.Settle(ctx, ss); err != nil {
		t.Fatal(err)
	}
}

// checkGroupsAgainstRows fails the test unless the dead-letter groups
// answered for each filter (from the kept group counts) are those the rows
// give (the same filter with Until set: read from the rows).
func checkGroupsAgainstRows(t *testing.T, s *Store, what string, until time.Time, fs ...store.ListFilter) {
	t.Helper()
	for _, f := range fs {
		got, err := s.DLQGroups(t.Context(), f, 20)
		if err != nil {
			t.Fatal(err)
		}
		rows := f
		rows.Until = until
		want, err := s.DLQGroups(t.Context(), rows, 20)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: groups of %+v: %+v, rows %+v", what, f, got, want)
		}
	}
}
