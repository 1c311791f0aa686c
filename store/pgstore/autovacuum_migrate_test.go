package pgstore_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// Migration 00053 on a database written by the version before it: the
// tasks, executions and events tables are vacuumed and analyzed by counts
// of changed rows, whatever their size; the rows they held are all there,
// and the queue claims and settles as before. Rolled back, the tables
// take the server's defaults again; applied again, the counts are back.
func TestAutovacuumByCountMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, tasks, got, counts := storeHoldingRows(t, 52, "av")
	before := counts()
	options := func() map[string][]string {
		t.Helper()
		rs, err := s.Pool().Query(ctx, `SELECT relname, COALESCE(reloptions, '{}') FROM pg_class
			WHERE relnamespace = current_schema()::regnamespace
				AND relname IN ('backstop_tasks', 'backstop_executions', 'backstop_events')`)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		out := map[string][]string{}
		for rs.Next() {
			var name string
			var opts []string
			if err := rs.Scan(&name, &opts); err != nil {
				t.Fatal(err)
			}
			slices.Sort(opts)
			out[name] = opts
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := []string{
		"autovacuum_analyze_scale_factor=0", "autovacuum_analyze_threshold=50000",
		"autovacuum_vacuum_insert_scale_factor=0", "autovacuum_vacuum_insert_threshold=100000",
		"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=10000",
	}
	check := func(when string, want []string) {
		t.Helper()
		got := options()
		if len(got) != 3 {
			t.Fatalf("%s: tables %v, want the three", when, got)
		}
		for name, opts := range got {
			if !slices.Equal(opts, want) {
				t.Errorf("%s: %s has %s, want %s", when, name, strings.Join(opts, " "), strings.Join(want, " "))
			}
		}
	}
	check("before", nil)

	if err := s.MigrateTo(ctx, 53); err != nil {
		t.Fatal(err)
	}
	check("migrated", want)
	if after := counts(); after != before {
		t.Fatalf("rows after the migration %v, before %v", after, before)
	}
	more := claim(t, s, "av", 10, t0.Add(time.Minute))
	if len(more) != 2 || !slices.Contains(ids(more), tasks[2].ID) || !slices.Contains(ids(more), got[1].ID) {
		t.Fatalf("claimed %v after the migration, want the pending task and the retried one", ids(more))
	}
	for _, tk := range more {
		if applied := settle(t, s, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Minute), State: bt.StateSucceeded}); !applied[0] {
			t.Fatalf("settle of %s not applied", tk.ID)
		}
	}

	if err := s.MigrateDownTo(ctx, 52); err != nil {
		t.Fatal(err)
	}
	check("rolled back", nil)
	if err := s.MigrateTo(ctx, 53); err != nil {
		t.Fatal(err)
	}
	check("applied again", want)
}

// storeHoldingRows is a store at schema version holding what a database
// of that version holds: three tasks of queue, one succeeded, one retried
// after a transient failure (an execution row) and one pending, and their
// events. counts is the number of rows of the tasks, executions and events
// tables; got is the two tasks claimed.
func storeHoldingRows(t *testing.T, version int64, queue string) (s *pgstore.Store, tasks, got []*bt.Task, counts func() [3]int) {
	t.Helper()
	s = storeAt(t, version)
	tasks = []*bt.Task{newTask(queue), newTask(queue), newTask(queue)}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	got = claim(t, s, queue, 2, t0)
	if len(got) != 2 {
		t.Fatalf("claimed %d, want 2", len(got))
	}
	settle(t, s,
		store.Settlement{TaskID: got[0].ID, ExecutionID: got[0].ExecutionID, Outcome: bt.OutcomeSucceeded, FinishedAt: t0, State: bt.StateSucceeded},
		store.Settlement{TaskID: got[1].ID, ExecutionID: got[1].ExecutionID, Outcome: bt.OutcomeTransientError, Error: "boom",
			FinishedAt: t0, State: bt.StatePending, RunAt: t0})
	counts = func() [3]int {
		t.Helper()
		var n [3]int
		if err := s.Pool().QueryRow(t.Context(), `SELECT (SELECT count(*) FROM backstop_tasks),
			(SELECT count(*) FROM backstop_executions), (SELECT count(*) FROM backstop_events)`).Scan(&n[0], &n[1], &n[2]); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := counts(); n[1] == 0 || n[2] == 0 {
		t.Fatalf("the old version's rows: %v tasks, executions, events; want an execution and events", n)
	}
	return s, tasks, got, counts
}
