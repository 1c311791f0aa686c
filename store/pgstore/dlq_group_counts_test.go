package pgstore_test

import (
	"reflect"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// dlqGroupFilters are filters whose groups are kept (store.GroupsKept).
var dlqGroupFilters = []store.ListFilter{
	{},
	{DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
	{Queue: "x", DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
	{Queue: "z"},
	{DLQStatuses: []bt.DLQStatus{bt.DLQDiscarded, bt.DLQResolved}},
}

// checkGroups: the groups of each kept filter equal the groups of the
// same filter read from the rows (a time range holding every dead letter
// makes DLQGroups group the rows).
func checkGroups(t *testing.T, s *pgstore.Store, what string) {
	t.Helper()
	for _, f := range dlqGroupFilters {
		got, err := s.DLQGroups(t.Context(), f, 20)
		if err != nil {
			t.Fatal(err)
		}
		rows := f
		rows.Until = t0.Add(1000 * time.Hour)
		want, err := s.DLQGroups(t.Context(), rows, 20)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: groups of %+v: %+v, rows %+v", what, f, got, want)
		}
	}
}

// Migration 00062 on a database holding dead letters: the kept groups
// start as their count and follow the writes after it (a death, a
// discard, a delete, a queue moved); the answer is read from them (a
// count made wrong behind the triggers' back shows, until a
// reconciliation corrects it); down and up again.
func TestDLQGroupCountsMigration(t *testing.T) {
	ctx := t.Context()
	s := storeAt(t, 59)
	seedCounts(t, s, 300) // 100 dead letters in x and y, "boom"
	var ss []store.Settlement
	for i, tk := range claim(t, s, "z", 9, t0.Add(time.Minute)) {
		ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeTransientError,
			Error: []string{"timeout", "refused", ""}[i%3], FinishedAt: t0.Add(time.Minute), State: bt.StateDead, DeadReason: bt.ReasonAttemptsExhausted})
	}
	settle(t, s, ss...)
	if err := s.MigrateTo(ctx, 62); err != nil {
		t.Fatal(err)
	}
	checkGroups(t, s, "migrated")
	ss = ss[:0]
	for _, tk := range claim(t, s, "z", 3, t0.Add(2*time.Minute)) {
		ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
			Error: "timeout", FinishedAt: t0.Add(2 * time.Minute), State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
	}
	settle(t, s, ss...)
	for _, q := range []string{
		`UPDATE backstop_tasks SET dlq_status = 'discarded' WHERE id IN (SELECT id FROM backstop_tasks WHERE state = 'dead' AND queue = 'x' ORDER BY id LIMIT 7)`,
		`DELETE FROM backstop_tasks WHERE id IN (SELECT id FROM backstop_tasks WHERE state = 'dead' AND queue = 'y' ORDER BY id LIMIT 5)`,
		`UPDATE backstop_tasks SET queue = 'z' WHERE id IN (SELECT id FROM backstop_tasks WHERE state = 'dead' AND queue = 'y' ORDER BY id LIMIT 4)`,
		`UPDATE backstop_tasks SET state = 'pending', dlq_status = NULL WHERE id IN (SELECT id FROM backstop_tasks WHERE state = 'dead' AND queue = 'x' AND dlq_status = 'open' ORDER BY id LIMIT 3)`,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	checkGroups(t, s, "written after")
	if _, err := s.FoldCounts(ctx); err != nil {
		t.Fatal(err)
	}
	checkGroups(t, s, "folded")

	before, err := s.DLQGroups(ctx, store.ListFilter{}, 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE backstop_dlq_group_counts SET n = n + 1000 WHERE queue = 'x' AND dlq_status = 'open'`); err != nil {
		t.Fatal(err)
	}
	after, err := s.DLQGroups(ctx, store.ListFilter{}, 20)
	if err != nil || after.Total != before.Total+1000 {
		t.Fatalf("a kept count raised by 1000: total %d → %d (%v), want the kept count read", before.Total, after.Total, err)
	}
	if d, err := s.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{Groups: 1, Tasks: 1000}) {
		t.Fatalf("reconcile: %+v %v, want one group of 1000", d, err)
	}
	checkGroups(t, s, "reconciled")
	if d, err := s.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile again: %+v %v", d, err)
	}
	if err := s.MigrateDownTo(ctx, 59); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	checkGroups(t, s, "applied again")
}
