package pgstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store/pgstore"
)

// A step settle's run statements (LockRuns' lock of the runs and read of
// their steps, UpdateRuns' update) are prepared on the connection and run
// from their generic plans, which find the runs and the step rows by the
// primary keys, whatever the batch, on tables never vacuumed (a new store:
// the plan is made in its first seconds and kept while the tables grow)
// and on a vacuumed history of 20,000 runs: never a scan of either table.
// With run_id = ANY($1) (the statements before branch wfstep6) the generic
// plan on a table never vacuumed of 10 to 300 runs scanned it.
func TestRunStatementsGenericPlansUseThePrimaryKeys(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	s := b.store
	fill := func(runs int, vacuum bool) {
		t.Helper()
		q := fmt.Sprintf(`TRUNCATE backstop_runs, backstop_run_steps;
INSERT INTO backstop_runs (run_id, workflow, version, plan_hash, state, error, seq, created_at, updated_at)
SELECT 'r-' || lpad(g::text, 9, '0'), 'linear', 1, 'h', 'running', '', 1, now(), now() FROM generate_series(1, %[1]d) g;
INSERT INTO backstop_run_steps (run_id, step_id, item, task_id, state, error, compensation_of, completed_seq, updated_at)
SELECT 'r-' || lpad(g::text, 9, '0'), 's' || st, 0, 'r-' || lpad(g::text, 9, '0') || '.s' || st, 'succeeded', '', '', 0, now()
FROM generate_series(1, %[1]d) g, generate_series(0, 4) st`, runs)
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
		if vacuum {
			if _, err := s.Pool().Exec(ctx, "VACUUM ANALYZE backstop_runs, backstop_run_steps"); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids := func(n int) string { return sqlArray(n, func(i int) string { return fmt.Sprintf("r-%09d", i) }) }
	each := func(n int, v string) string { return sqlArray(n, func(int) string { return v }) }
	statements := []struct {
		name, sql, table string
		args             func(n int) string
	}{
		{"the runs' lock", pgstore.SQLLockRuns, "backstop_runs", ids},
		{"their steps' read", pgstore.SQLLockedSteps, "backstop_run_steps", ids},
		{"the runs' update", pgstore.SQLUpdateRuns, "backstop_runs", func(n int) string {
			return strings.Join([]string{ids(n), each(n, "running"), each(n, `""`), each(n, "2"),
				each(n, `"2026-01-01 00:00:00+00"`), each(n, "NULL")}, ", ")
		}},
	}
	for _, size := range []struct {
		name   string
		runs   int
		vacuum bool
	}{
		{"never vacuumed, 10 runs", 10, false},
		{"never vacuumed, 300 runs", 300, false},
		{"never vacuumed, 2,400 runs", 2400, false},
		{"20,000 runs", 20000, true},
	} {
		fill(size.runs, size.vacuum)
		for _, st := range statements {
			for _, n := range []int{1, 8, 100} {
				plan := genericPlan(t, ctx, s, st.sql, st.args(n))
				byKey := strings.Contains(plan, "Index Scan using "+st.table+"_pkey") ||
					strings.Contains(plan, "Bitmap Index Scan on "+st.table+"_pkey")
				if !byKey || strings.Contains(plan, "Seq Scan on "+st.table) {
					t.Errorf("%s, %s, batch of %d: the generic plan does not find the rows by the primary key:\n%s",
						st.name, size.name, n, plan)
				}
			}
		}
	}
}
