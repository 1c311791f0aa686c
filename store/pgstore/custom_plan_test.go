package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// The general settle and the heartbeat are planned for each batch, never
// run from a generic plan: a generic plan is made once per connection,
// from the table's size when it was made, and kept. Made while the table
// was small (a new database, the first seconds of a worker), theirs
// hash-joined the batch against a scan of the whole table, and every later
// settle scanned every row kept. The success settle is written so that its
// generic plan finds each row by the primary key
// (TestSuccessSettleGenericPlanUsesThePrimaryKey), and is run from it.
func TestSettlePlans(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	// One connection, so that its prepared statements can be read.
	s, err := pgstore.Open(ctx, b.url+"&pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const n = 12 // more than the five custom plans before a generic one
	var tasks []*bt.Task
	for range 3 * n {
		tasks = append(tasks, newTask("plan"))
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	claimed := claim(t, s, "plan", 3*n, t0)
	if len(claimed) != 3*n {
		t.Fatalf("claimed %d, want %d", len(claimed), 3*n)
	}
	done := t0.Add(time.Second)
	for i, c := range claimed {
		switch {
		case i < n: // a heartbeat of one, then of two
			if _, err := s.Heartbeat(ctx, []store.Beat{{TaskID: c.ID, ExecutionID: c.ExecutionID}}, done, done.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			other := claimed[i+n]
			if _, err := s.Heartbeat(ctx, []store.Beat{{TaskID: c.ID, ExecutionID: c.ExecutionID},
				{TaskID: other.ID, ExecutionID: other.ExecutionID}}, done, done.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			settle(t, s, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded,
				FinishedAt: done, State: bt.StateSucceeded})
		case i < 2*n: // the general statement
			settle(t, s, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeTransientError,
				Error: "boom", FinishedAt: done, State: bt.StateScheduled, RunAt: done.Add(time.Minute)})
		}
	}

	rows, err := s.Pool().Query(ctx, `SELECT statement LIKE '%settle_link%', left(regexp_replace(statement, '\s+', ' ', 'g'), 60),
		generic_plans, custom_plans
		FROM pg_prepared_statements WHERE statement LIKE '%WITH input AS%' AND statement NOT LIKE '%pg_prepared_statements%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	success := false
	for rows.Next() {
		var (
			isSuccess       bool
			stmt            string
			generic, custom int64
		)
		if err := rows.Scan(&isSuccess, &stmt, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		switch {
		case isSuccess:
			success = true
			if generic == 0 {
				t.Errorf("the success settle never ran from its generic plan (%d custom)", custom)
			}
		case generic > 0:
			t.Errorf("%q ran %d times from a generic plan (%d custom)", stmt, generic, custom)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !success {
		t.Error("the success settle is not a prepared statement")
	}
}

// The success settle's generic plan (the one it runs from: TestSettlePlans)
// finds each task of the batch by the primary key, whatever the batch's
// size, on a table never vacuumed and on tables of a thousand running
// tasks or a hundred thousand, with a history behind them or not: never a
// scan of the table, nor of an index over all running tasks.
func TestSuccessSettleGenericPlanUsesThePrimaryKey(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	s := b.store
	fill := func(history, running int, vacuum bool) {
		t.Helper()
		q := fmt.Sprintf(`TRUNCATE backstop_tasks CASCADE;
INSERT INTO backstop_tasks (id, queue, kind, state, max_attempts, attempt, payload, run_at, created_at, updated_at,
	finalized_at, event_links, execution_id, worker_id, attempted_at)
SELECT 'h-' || lpad(g::text, 9, '0'), 'q', 'k', 'succeeded', 3, 1, '{"n":1}', now(), now(), now(), now(), ARRAY[1::bigint],
	'x-' || g, 'w', now()
FROM generate_series(1, %d) g;
INSERT INTO backstop_tasks (id, queue, kind, state, max_attempts, attempt, payload, run_at, created_at, updated_at,
	lease_expires_at, event_links, execution_id, worker_id, attempted_at)
SELECT 'r-' || lpad(g::text, 9, '0'), 'q', 'k', 'running', 3, 1, '{"n":1}', now(), now(), now(), now() + interval '1 hour',
	ARRAY[1::bigint], 'e-' || g, 'w', now()
FROM generate_series(1, %d) g`, history, running)
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
		if vacuum {
			if _, err := s.Pool().Exec(ctx, "VACUUM ANALYZE backstop_tasks"); err != nil {
				t.Fatal(err)
			}
		}
	}
	array := func(n int, f func(int) string) string {
		var els []string
		for i := 1; i <= n; i++ {
			els = append(els, f(i))
		}
		return "'{" + strings.Join(els, ",") + "}'"
	}
	for _, size := range []struct {
		name             string
		history, running int
		vacuum           bool
	}{
		{"never vacuumed, 10 running", 0, 10, false},
		{"1,000 running", 0, 1000, true},
		{"100,000 finished", 100000, 0, true},
		{"100,000 finished, 20,000 running", 100000, 20000, true},
	} {
		fill(size.history, size.running, size.vacuum)
		for _, n := range []int{1, 8, 1000} {
			tx, err := s.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := genericPlan(ctx, tx, n, array)
			_ = tx.Rollback(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(plan, "Index Scan using backstop_tasks_pkey on backstop_tasks t") ||
				strings.Contains(plan, "Seq Scan on backstop_tasks") || strings.Contains(plan, "backstop_tasks_lease") ||
				strings.Contains(plan, "backstop_tasks_running") {
				t.Errorf("%s, batch of %d: the generic plan does not find the rows by the primary key:\n%s", size.name, n, plan)
			}
		}
	}
}

// genericPlan is the EXPLAIN of the success settle's generic plan for a
// batch of the n running tasks r-1… (array writes an array literal).
func genericPlan(ctx context.Context, tx pgx.Tx, n int, array func(int, func(int) string) string) (string, error) {
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, "PREPARE success_settle AS "+pgstore.SQLSettleSucceeded); err != nil {
		return "", err
	}
	args := strings.Join([]string{
		array(n, func(i int) string { return fmt.Sprintf("r-%09d", i) }),
		array(n, func(i int) string { return fmt.Sprintf("e-%d", i) }),
		array(n, func(int) string { return `"2026-01-01 00:00:00+00"` }),
		array(n, func(int) string { return "false" }),
		array(n, func(int) string { return "0" }),
		array(n, func(int) string { return "0" }),
		"'actor'",
	}, ", ")
	rows, err := tx.Query(ctx, "EXPLAIN EXECUTE success_settle("+args+")")
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	// A prepared statement outlives the transaction.
	_, err = tx.Exec(ctx, "DEALLOCATE success_settle")
	return strings.Join(lines, "\n"), err
}
