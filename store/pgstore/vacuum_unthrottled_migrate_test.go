package pgstore_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Migration 00065 on a database holding tasks, attempts and events: the
// autovacuum of backstop_tasks runs without the cost-based sleep, and the
// table keeps migration 00053's vacuum and analyze by count; the other
// tables keep the server's throttle. The rows are all there and the queue
// claims and settles as before. Rolled back, the table loses only the
// cost delay; applied again, it has it again.
func TestTasksVacuumUnthrottledMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, tasks, got, counts := storeHoldingRows(t, 64, "vac")
	before := counts()
	options := func(table string) []string {
		t.Helper()
		var opts []string
		if err := s.Pool().QueryRow(ctx, `SELECT COALESCE(reloptions, '{}') FROM pg_class
			WHERE relnamespace = current_schema()::regnamespace AND relname = $1`, table).Scan(&opts); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		slices.Sort(opts)
		return opts
	}
	byCount := []string{
		"autovacuum_analyze_scale_factor=0", "autovacuum_analyze_threshold=50000",
		"autovacuum_vacuum_insert_scale_factor=0", "autovacuum_vacuum_insert_threshold=100000",
		"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=10000",
	}
	unthrottled := slices.Sorted(slices.Values(append([]string{"autovacuum_vacuum_cost_delay=0"}, byCount...)))
	check := func(when string, tasksWant []string) {
		t.Helper()
		for table, want := range map[string][]string{
			"backstop_tasks": tasksWant, "backstop_executions": byCount, "backstop_events": byCount,
		} {
			if got := options(table); !slices.Equal(got, want) {
				t.Errorf("%s: %s has %s, want %s", when, table, strings.Join(got, " "), strings.Join(want, " "))
			}
		}
	}
	check("before", byCount)

	if err := s.MigrateTo(ctx, 65); err != nil {
		t.Fatal(err)
	}
	check("migrated", unthrottled)
	if after := counts(); after != before {
		t.Fatalf("rows after the migration %v, before %v", after, before)
	}
	more := claim(t, s, "vac", 10, t0.Add(time.Minute))
	if len(more) != 2 || !slices.Contains(ids(more), tasks[2].ID) || !slices.Contains(ids(more), got[1].ID) {
		t.Fatalf("claimed %v after the migration, want the pending task and the retried one", ids(more))
	}
	for _, tk := range more {
		if applied := settle(t, s, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Minute), State: bt.StateSucceeded}); !applied[0] {
			t.Fatalf("settle of %s not applied", tk.ID)
		}
	}

	if err := s.MigrateDownTo(ctx, 64); err != nil {
		t.Fatal(err)
	}
	check("rolled back", byCount)
	if err := s.MigrateTo(ctx, 65); err != nil {
		t.Fatal(err)
	}
	check("applied again", unthrottled)
}
