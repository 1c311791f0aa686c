package pgstore_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// indexesHolding lists the indexes of backstop_tasks whose predicate the
// current version of task id meets (every index without one): the indexes
// an update of the row that is not HOT writes an entry in.
func indexesHolding(t *testing.T, s *pgstore.Store, id string) []string {
	t.Helper()
	ctx := t.Context()
	rows, err := s.Pool().Query(ctx, `SELECT indexrelid::regclass::text, coalesce(pg_get_expr(indpred, indrelid), 'true')
		FROM pg_index WHERE indrelid = 'backstop_tasks'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type index struct{ name, pred string }
	var all []index
	for rows.Next() {
		var ix index
		if err := rows.Scan(&ix.name, &ix.pred); err != nil {
			t.Fatal(err)
		}
		all = append(all, ix)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ix := range all {
		var holds bool
		if err := s.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM backstop_tasks WHERE id = $1 AND (`+ix.pred+`))`, id).Scan(&holds); err != nil {
			t.Fatal(err)
		}
		if holds {
			out = append(out, ix.name)
		}
	}
	return out
}

// The drain's two row writes are never HOT (the state changes, and
// partial indexes test it), so each writes an entry in every index whose
// predicate the new row version meets. A plain task (no idempotency key,
// no run) claimed is in the primary key and the running index only; the
// same task succeeded, in the primary key and the finished index only.
func TestClaimSettleIndexEntries(t *testing.T) {
	b := setup(t)
	s := b.store
	task := newTask("q")
	enqueue(t, s, store.EnqueueOpts{}, task)
	c := claim(t, s, "q", 1, t0)
	if len(c) != 1 {
		t.Fatalf("claimed %d", len(c))
	}
	if got, want := indexesHolding(t, s, task.ID), []string{"backstop_tasks_pkey", "backstop_tasks_running"}; !slices.Equal(got, want) {
		t.Fatalf("a claimed task is in %v, want %v", got, want)
	}
	if ok := settle(t, s, store.Settlement{TaskID: task.ID, ExecutionID: c[0].ExecutionID, Outcome: bt.OutcomeSucceeded,
		FinishedAt: t0.Add(time.Second), State: bt.StateSucceeded}); !ok[0] {
		t.Fatal("not settled")
	}
	if got, want := indexesHolding(t, s, task.ID), []string{"backstop_tasks_finished", "backstop_tasks_pkey"}; !slices.Equal(got, want) {
		t.Fatalf("a succeeded task is in %v, want %v", got, want)
	}
}

// Migration 00051 on a database written by the version before it (00050),
// holding running tasks of two queues and kinds, some past their lease,
// and finished ones: the lease-expiry sweep finds the same tasks in the
// same order, the running counts (the console's, a limited claim's) are
// the same, the sweep reads the running index (a sequential scan
// forbidden, as a large table would), and the lease index is gone. Rolled
// back and applied again, it leaves the same answers.
func TestRunningIndexMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storeAt(t, 50)
	var tasks []*bt.Task
	for i := range 300 {
		tk := newTask(fmt.Sprintf("q%d", i%2))
		if i%3 == 0 {
			tk.Kind = "k2"
		}
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	// q0's leases end at t0+1m, q1's at t0+1m30s; 20 of q0's succeed.
	c0 := claim(t, s, "q0", 80, t0)
	claim(t, s, "q1", 60, t0.Add(30*time.Second))
	for _, tk := range c0[:20] {
		settle(t, s, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Second), State: bt.StateSucceeded})
	}
	if _, err := s.Pool().Exec(ctx, "ANALYZE backstop_tasks"); err != nil {
		t.Fatal(err)
	}
	sweepAt := []time.Time{t0.Add(75 * time.Second), t0.Add(2 * time.Minute)}
	expired := func() [][]string {
		t.Helper()
		var out [][]string
		for _, at := range sweepAt {
			got, err := s.ExpiredLeases(ctx, at, 1000)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ids(got))
		}
		return out
	}
	running := func() string {
		t.Helper()
		rows, err := s.Pool().Query(ctx, `SELECT queue || '/' || kind || '=' || count(*) FROM backstop_tasks
			WHERE state = 'running' GROUP BY queue, kind ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return strings.Join(out, " ")
	}
	wantExpired, wantRunning := expired(), running()
	// The counts by queue and state, as a grouped count of the rows (the
	// store's own count reads kept counts, a later schema's).
	byState := func() string {
		t.Helper()
		var v string
		if err := s.Pool().QueryRow(ctx, `SELECT coalesce(string_agg(g, ' ' ORDER BY g), '') FROM (
			SELECT queue || '/' || state || '=' || count(*) AS g FROM backstop_tasks GROUP BY queue, state) x`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	wantCounts := byState()
	if len(wantExpired[0]) != 60 || len(wantExpired[1]) != 120 {
		t.Fatalf("a poor fixture: %d and %d expired", len(wantExpired[0]), len(wantExpired[1]))
	}
	indexDef := func(name string) string {
		t.Helper()
		var def string
		if err := s.Pool().QueryRow(ctx, `SELECT coalesce((SELECT pg_get_indexdef(to_regclass($1))), '')`, name).Scan(&def); err != nil {
			t.Fatal(err)
		}
		return def
	}
	check := func(label string, migrated bool) {
		t.Helper()
		if got := expired(); !slices.EqualFunc(got, wantExpired, slices.Equal) {
			t.Fatalf("%s: expired %v, want %v", label, got, wantExpired)
		}
		if got := running(); got != wantRunning {
			t.Fatalf("%s: running %s, want %s", label, got, wantRunning)
		}
		if got := byState(); got != wantCounts {
			t.Fatalf("%s: counts %s, want %s", label, got, wantCounts)
		}
		lease, run := indexDef("backstop_tasks_lease"), indexDef("backstop_tasks_running")
		if migrated != (lease == "") || migrated != strings.Contains(run, "(queue, kind, lease_expires_at)") {
			t.Fatalf("%s: lease index %q, running index %q", label, lease, run)
		}
		if !migrated {
			return
		}
		plan, err := s.ExplainExpiredLeases(ctx, sweepAt[0], map[string]string{"enable_seqscan": "off"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan, "backstop_tasks_running") || strings.Contains(plan, "Seq Scan") {
			t.Fatalf("%s: sweep plan:\n%s", label, plan)
		}
	}
	check("before", false)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check("migrated", true)
	if err := s.MigrateDownTo(ctx, 50); err != nil {
		t.Fatal(err)
	}
	check("rolled back", false)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check("applied again", true)
}
