package pgstore_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Migration 00050 on a database written by the version before it (00043):
// the dead letters it finds get their fingerprints, and the groups are the
// GROUPING SETS query's; a run's tasks are the tasks whose attributes
// contain its run_id, read through the run index; the plans read both
// indexes (a sequential scan forbidden, as a large table would). Rolled
// back and applied again, it leaves the same answers.
func TestRunAndGroupReadsMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storeAt(t, 43)
	runs := []string{"run-1", "run-10", "run-2"}
	var tasks []*bt.Task
	for i := range 300 {
		tk := newTask(fmt.Sprintf("q%d", i%3))
		tk.ID = fmt.Sprintf("rg-%04d", i)
		switch {
		case i%7 == 0: // no run
		case i%11 == 0: // a run_id beside other attributes
			tk.Attributes = map[string]string{"run_id": runs[i%3], "tenant": "t1"}
		default:
			tk.Attributes = map[string]string{"run_id": runs[i%3]}
		}
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	// The version before killed tasks this way (its settle wrote no
	// fingerprint): 150 dead letters of three reasons and five errors, a
	// NULL one and two sharing their first 200 characters among them.
	long := strings.Repeat("y", 200)
	for _, q := range []string{"q0", "q1", "q2"} {
		claim(t, s, q, 50, t0)
	}
	killAsBefore(t, s, "(ARRAY['permanent_error', 'attempts_exhausted', 'poison'])[substr(id, 6)::int % 3 + 1]",
		"(ARRAY[NULL, 'timeout', '"+long+" a', '"+long+" b', 'card declined'])[substr(id, 6)::int % 5 + 1]")
	if _, err := s.Pool().Exec(ctx, `UPDATE backstop_tasks SET dlq_status = 'discarded' WHERE state = 'dead' AND substr(id, 6)::int % 9 = 0`); err != nil {
		t.Fatal(err)
	}
	filters := []store.ListFilter{
		{DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
		{Queue: "q1", DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
		{DLQStatuses: []bt.DLQStatus{bt.DLQDiscarded}},
		{},
	}
	runTasks := func(run string) []string {
		t.Helper()
		rows, err := s.Pool().Query(ctx, `SELECT id FROM backstop_tasks WHERE attributes @> jsonb_build_object('run_id', $1::text) ORDER BY id`, run)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		ids := []string{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	var before []*store.DLQGroups
	for _, f := range filters {
		before = append(before, groupsAsBefore(t, s, f, 3))
	}
	runsBefore := map[string][]string{}
	for _, r := range runs {
		runsBefore[r] = runTasks(r)
	}
	check := func(label string) {
		t.Helper()
		for i, f := range filters {
			got, err := s.DLQGroups(ctx, f, 3)
			if err != nil {
				t.Fatal(err)
			}
			if before[i].Total == 0 || !before[i].MoreErrors {
				t.Fatalf("a poor fixture: %+v", before[i])
			}
			jsonEqual(t, fmt.Sprintf("%s: groups of %+v", label, f), got, before[i])
		}
		for _, r := range runs {
			for _, f := range []store.ListFilter{
				{Attrs: map[string]string{"run_id": r}, Limit: 1000},
				{Attrs: map[string]string{"run_id": r}, Limit: 1000, WithoutPayload: true, Newest: true},
				{Attrs: map[string]string{"run_id": r, "tenant": "t1"}, Limit: 1000},
			} {
				page, err := s.List(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				got := []string{}
				for _, tk := range page {
					got = append(got, tk.ID)
				}
				want := runsBefore[r]
				if f.Newest {
					slices.Sort(got)
				}
				if f.Attrs["tenant"] != "" {
					want = nil
					for _, id := range runsBefore[r] {
						var n int
						fmt.Sscanf(id, "rg-%d", &n)
						if n%11 == 0 {
							want = append(want, id)
						}
					}
				}
				if len(runsBefore[r]) < 50 || !slices.Equal(got, want) && len(got)+len(want) > 0 {
					t.Fatalf("%s: %+v: %v, want %v", label, f, got, want)
				}
			}
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var missing int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM backstop_tasks WHERE state = 'dead' AND dlq_group IS NULL`).Scan(&missing); err != nil || missing != 0 {
		t.Fatalf("%d dead letters without a fingerprint after the migration (%v)", missing, err)
	}
	check("migrated")
	// Vacuumed, as autovacuum leaves a table in use: the visibility map
	// that an index-only scan reads.
	if _, err := s.Pool().Exec(ctx, "VACUUM (ANALYZE) backstop_tasks"); err != nil {
		t.Fatal(err)
	}
	// No scan, and no walk of an index with a filter: a read of the run
	// index, or a bitmap of the primary key filtered, which costs more.
	noWalk := map[string]string{"enable_seqscan": "off", "enable_indexscan": "off"}
	for _, f := range []store.ListFilter{
		{Attrs: map[string]string{"run_id": "run-1"}, Limit: 10000, WithoutPayload: true},
		{Attrs: map[string]string{"run_id": "run-1", "step_id": "a"}, States: []bt.State{bt.StateRunning}},
	} {
		p, err := s.ExplainList(ctx, f, noWalk)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p, "backstop_tasks_run") {
			t.Errorf("a run's tasks (%+v) are not read through the run index:\n%s", f, p)
		}
	}
	// The groups are read from their kept counts (migration 00062); the
	// tasks only for the dead letters without a fingerprint (none here).
	noBitmap := map[string]string{"enable_seqscan": "off", "enable_bitmapscan": "off"}
	for _, f := range filters[:3] {
		p, err := s.ExplainDLQGroups(ctx, f, noBitmap)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(p, "\n")
		ok := strings.Contains(p, "backstop_dlq_group_counts")
		for i, l := range lines {
			if strings.Contains(l, " on backstop_tasks ") && (i+1 == len(lines) || !strings.Contains(lines[i+1], "dlq_group IS NULL")) {
				ok = false
			}
		}
		if !ok {
			t.Errorf("the groups of %+v are not read from the kept counts:\n%s", f, p)
		}
	}
	if err := s.MigrateDownTo(ctx, 43); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check("applied again")
	// A dead letter of this version gets its fingerprint from the settle
	// that kills it, and counts with the migrated ones.
	tk := claim(t, s, "q0", 1, t0)[0]
	settle(t, s, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
		Error: "timeout", FinishedAt: t0, State: bt.StateDead, DeadReason: bt.ReasonPoison})
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM backstop_tasks WHERE state = 'dead' AND dlq_group IS NULL`).Scan(&missing); err != nil || missing != 0 {
		t.Fatalf("%d dead letters without a fingerprint after a settle (%v)", missing, err)
	}
	got, err := s.DLQGroups(ctx, filters[0], 3)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "groups after a settle", got, groupsAsBefore(t, s, filters[0], 3))
}
