package pgstore_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A task whose id starts with its run_id and a dot (a workflow's step
// task) writes no entry in the run index on its claim or its settle; a
// task of a run with any other id (a batch's, a plain task joined to a
// run) is in it, as before.
func TestStepTaskWritesNoRunIndexEntry(t *testing.T) {
	b := setup(t)
	s := b.store
	step, other := newTask("q"), newTask("q")
	step.ID, step.Attributes = "wr-1.charge", map[string]string{"run_id": "wr-1"}
	other.Attributes = map[string]string{"run_id": "wr-1"}
	enqueue(t, s, store.EnqueueOpts{}, step, other)
	inRunIndex := func(id string) bool {
		return slices.Contains(indexesHolding(t, s, id), "backstop_tasks_run")
	}
	if inRunIndex(step.ID) || !inRunIndex(other.ID) {
		t.Fatalf("enqueued: the step task in the run index %v, the other %v; want false, true", inRunIndex(step.ID), inRunIndex(other.ID))
	}
	for _, c := range claim(t, s, "q", 2, t0) {
		if c.ID == step.ID && inRunIndex(c.ID) {
			t.Fatal("a claimed step task is in the run index")
		}
		settle(t, s, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Second), State: bt.StateSucceeded})
	}
	if inRunIndex(step.ID) || !inRunIndex(other.ID) {
		t.Fatalf("settled: the step task in the run index %v, the other %v; want false, true", inRunIndex(step.ID), inRunIndex(other.ID))
	}
	page, err := s.List(t.Context(), store.ListFilter{Attrs: map[string]string{"run_id": "wr-1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{step.ID, other.ID}
	slices.Sort(want)
	if got := ids(page); !slices.Equal(got, want) {
		t.Fatalf("the run's tasks: %v, want %v", got, want)
	}
}

// Migration 00058 on a database written by the version before it (00057),
// holding runs with step-shaped tasks (steps, fan-out items, a sink
// message), tasks of the runs with other ids, a plain task named with its
// run's prefix, runs whose ids are prefixes of others' and tasks named
// after another run: each run's tasks (the List of its run_id, as the run
// read and GET /v1/runs/{id} do, every order and with a further attribute
// and a state) are the tasks whose attributes contain its run_id, before
// and after, rolled back and applied again; the plan reads the run index
// and the primary key (no sequential scan), and the index holds no step
// task.
func TestRunIndexWithoutStepsMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storeAt(t, 57)
	runs := []string{"run-1", "run-10", "run-2", "b.1", "b"}
	var tasks []*bt.Task
	for i := range 400 {
		tk := newTask(fmt.Sprintf("q%d", i%2))
		run := runs[i%len(runs)]
		switch i % 8 {
		case 0:
			tk.ID = fmt.Sprintf("%s.step%d", run, i)
		case 1:
			tk.ID = fmt.Sprintf("%s.each.%d", run, i)
		case 2:
			tk.ID = fmt.Sprintf("%s.pub%d.sink.%d", run, i, i)
		case 3: // a task of the run named after another one
			tk.ID = fmt.Sprintf("%s.x%d", runs[(i+1)%len(runs)], i)
		case 4: // no run, a run's prefix
			tk.ID = fmt.Sprintf("%s.none%d", run, i)
			tk.Attributes = map[string]string{"tenant": "t1"}
			tasks = append(tasks, tk)
			continue
		default:
			tk.ID = fmt.Sprintf("rs-%04d", i)
		}
		tk.Attributes = map[string]string{"run_id": run}
		if i%3 == 0 {
			tk.Attributes["tenant"] = "t1"
		}
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	for _, q := range []string{"q0", "q1"} {
		for _, c := range claim(t, s, q, 120, t0)[:60] {
			settle(t, s, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded,
				FinishedAt: t0.Add(time.Second), State: bt.StateSucceeded})
		}
	}
	filters := func(run string) []store.ListFilter {
		return []store.ListFilter{
			{Attrs: map[string]string{"run_id": run}, Limit: 1000},
			{Attrs: map[string]string{"run_id": run}, Limit: 1000, WithoutPayload: true, Newest: true},
			{Attrs: map[string]string{"run_id": run}, Limit: 7, AfterID: run + ".step"},
			{Attrs: map[string]string{"run_id": run, "tenant": "t1"}, Limit: 1000},
			{Attrs: map[string]string{"run_id": run}, States: []bt.State{bt.StateRunning}, Limit: 1000},
		}
	}
	read := func() map[string][]string {
		t.Helper()
		out := map[string][]string{}
		for _, r := range runs {
			for i, f := range filters(r) {
				page, err := s.List(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				out[fmt.Sprint(r, i)] = ids(page)
			}
		}
		return out
	}
	before := read()
	for _, r := range runs {
		var want int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM backstop_tasks WHERE attributes @> jsonb_build_object('run_id', $1::text)`, r).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got := len(before[r+"0"]); got != want || want < 50 {
			t.Fatalf("run %s: %d tasks read, %d hold its run_id", r, got, want)
		}
	}
	check := func(label string) {
		t.Helper()
		after := read()
		for k, want := range before {
			if !slices.Equal(after[k], want) {
				t.Errorf("%s: %s: %v, want %v", label, k, after[k], want)
			}
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check("migrated")
	var steps int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM backstop_tasks WHERE attributes ? 'run_id'
		AND starts_with(id, (attributes->>'run_id') || '.')`).Scan(&steps); err != nil || steps < 100 {
		t.Fatalf("%d step-shaped tasks (%v)", steps, err)
	}
	var indexed, all int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT starts_with(id, (attributes->>'run_id') || '.')), count(*)
		FROM backstop_tasks WHERE attributes ? 'run_id'`).Scan(&indexed, &all); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, "VACUUM (ANALYZE) backstop_tasks"); err != nil {
		t.Fatal(err)
	}
	var entries float64
	if err := s.Pool().QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'backstop_tasks_run'::regclass`).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if int(entries) != indexed || indexed == all {
		t.Errorf("the run index has %v entries, want the %d tasks of runs that are not step-shaped (of %d)", entries, indexed, all)
	}
	noScan := map[string]string{"enable_seqscan": "off", "enable_indexscan": "off"}
	p, err := s.ExplainList(ctx, store.ListFilter{Attrs: map[string]string{"run_id": "run-1"}, Limit: 1000}, noScan)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p, "backstop_tasks_run") || !strings.Contains(p, "backstop_tasks_pkey") {
		t.Errorf("a run's tasks are not read through the run index and the primary key:\n%s", p)
	}
	if err := s.MigrateDownTo(ctx, 57); err != nil {
		t.Fatal(err)
	}
	check("rolled back")
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check("applied again")
}
