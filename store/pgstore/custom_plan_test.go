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

// The settles and the heartbeat of one beat are prepared on the
// connection and, after their first custom plans, run from their generic
// plans, which find each row by the primary key
// (TestSettleGenericPlansUseThePrimaryKey): not planned for each call,
// whose planning cost as much as the execution. The heartbeat of a batch
// is planned for each batch: its generic plan joins its two halves back by
// a nested loop, quadratic in the batch.
func TestSettlePlans(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	s := storeWithPool(t, b, 1) // its prepared statements can be read

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

	rows, err := s.Pool().Query(ctx, `SELECT CASE WHEN statement LIKE '%settle_link%' THEN 'the success settle'
		WHEN statement LIKE '%recorded AS%' THEN 'the general settle'
		WHEN statement LIKE '%SKIP LOCKED%' THEN 'the heartbeat of a batch' ELSE 'the heartbeat of one' END,
		generic_plans, custom_plans
		FROM pg_prepared_statements WHERE statement LIKE '%WITH input AS%' AND statement NOT LIKE '%pg_prepared_statements%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var (
			stmt            string
			generic, custom int64
		)
		if err := rows.Scan(&stmt, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		seen++
		switch {
		case stmt == "the heartbeat of a batch": // an unnamed statement, planned for each batch
			t.Errorf("%s is a prepared statement (%d generic plans, %d custom)", stmt, generic, custom)
		case generic == 0:
			t.Errorf("%s never ran from its generic plan (%d custom)", stmt, custom)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The success settle, the general settle, the heartbeat of one.
	if seen != 3 {
		t.Errorf("%d of the settles and heartbeats are prepared statements, want 3", seen)
	}
}

// The generic plans of the success settle, the general settle and the
// heartbeat of one beat (the ones they run from: TestSettlePlans) find each task of
// the batch by the primary key and check its lease there, whatever the batch's
// size, on a table never vacuumed and on tables of a thousand running
// tasks or a hundred thousand, with a history behind them or not: never a
// scan of the table, nor of an index over all running tasks.
func TestSettleGenericPlansUseThePrimaryKey(t *testing.T) {
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
		for _, st := range settlePlanStatements(sqlArray) {
			for _, n := range []int{1, 8, 1000} {
				plan := genericPlan(t, ctx, s, st.sql, st.args(n))
				if !strings.Contains(plan, "Index Scan using backstop_tasks_pkey on backstop_tasks t") ||
					strings.Contains(plan, "Seq Scan on backstop_tasks") || strings.Contains(plan, "backstop_tasks_lease") ||
					strings.Contains(plan, "backstop_tasks_running") {
					t.Errorf("%s, %s, batch of %d: the generic plan does not find the rows by the primary key:\n%s",
						st.name, size.name, n, plan)
				}
			}
		}
	}
}

// settlePlanStatement is a statement run from its generic plan, with the
// arguments of a batch of the n running tasks r-1… (their current leases).
type settlePlanStatement struct {
	name string
	sql  string
	args func(n int) string
}

// settlePlanStatements are the success settle, the general settle and the
// heartbeat of one beat; array writes an array literal.
func settlePlanStatements(array func(int, func(int) string) string) []settlePlanStatement {
	ids := func(n int) string { return sqlArray(n, func(i int) string { return fmt.Sprintf("r-%09d", i) }) }
	execs := func(n int) string { return sqlArray(n, func(i int) string { return fmt.Sprintf("e-%d", i) }) }
	each := func(n int, v string) string { return sqlArray(n, func(int) string { return v }) }
	const at = `"2026-01-01 00:00:00+00"`
	heartbeat := func(n int) string {
		return strings.Join([]string{ids(n), execs(n), each(n, "false"), each(n, "0"), each(n, "0"),
			"'2026-01-01 01:00:00+00'", "'2026-01-01 00:00:00+00'", "'actor'"}, ", ")
	}
	return []settlePlanStatement{
		{"the success settle", pgstore.SQLSettleSucceeded, func(n int) string {
			return strings.Join([]string{ids(n), execs(n), each(n, at), each(n, "false"), each(n, "0"), each(n, "0"),
				"'actor'"}, ", ")
		}},
		{"the general settle", pgstore.SQLSettle, func(n int) string {
			return strings.Join([]string{ids(n), execs(n), each(n, "transient_error"), each(n, "boom"), each(n, `""`),
				each(n, at), each(n, "scheduled"), each(n, at), each(n, `""`), each(n, "false"), each(n, "false"),
				each(n, "0"), each(n, "0"), "'actor'"}, ", ")
		}},
		{"the heartbeat of one", pgstore.SQLHeartbeat, heartbeat},
	}
}

// genericPlan is the EXPLAIN of the generic plan of sql run with args
// (SQL literals, comma-separated), made in a transaction of its own on one
// of s's connections and rolled back.
func genericPlan(t *testing.T, ctx context.Context, s *pgstore.Store, sql, args string) string {
	t.Helper()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // it only plans
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "PREPARE settle_plan AS "+sql); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN EXECUTE settle_plan("+args+")")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// A prepared statement outlives the transaction.
	if _, err := tx.Exec(ctx, "DEALLOCATE settle_plan"); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// A connection prepares its claim statements itself and makes them again
// once they are older than their period, the first time after a fifth of
// the claim plan period. The generic plan of the pick from the head,
// made while the table held a few tasks, finds the picked rows by a scan
// of the whole table; kept, it scanned the table as it grew (until a
// vacuum or an analyze). Made again after the first period, on the grown
// table, it finds them by their tids.
func TestClaimPlanIsMadeAgainAfterItsPeriod(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	s := storeWithPool(t, b, 1) // its prepared statements can be read
	// The first period, and the period, longer than the test.
	const first, period = 2 * time.Second, 10 * time.Second
	s.SetClaimPlanPeriod(period)
	// Claims that come back short: each runs the pick from the head alone.
	claims := func(n int) {
		t.Helper()
		for range n {
			enqueue(t, s, store.EnqueueOpts{}, newTask("plan"))
			if got := claim(t, s, "plan", 5, t0); len(got) != 1 {
				t.Fatalf("claimed %d, want 1", len(got))
			}
		}
	}
	// plan is the plan the connection's pick from the head runs from now.
	plan := func() string {
		t.Helper()
		var name string
		var generic int64
		err := s.Pool().QueryRow(ctx, `SELECT name, generic_plans FROM pg_prepared_statements
			WHERE statement LIKE '%WITH picked AS%' AND statement NOT LIKE '%(run_at, id) >%'
			AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&name, &generic)
		if err != nil {
			t.Fatal(err)
		}
		if generic == 0 {
			t.Fatalf("the pick from the head has run no generic plan")
		}
		rows, err := s.Pool().Query(ctx, "EXPLAIN EXECUTE "+name+"('plan', now(), 5, 'w', now() + interval '1 minute')")
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	// preparedAt is when the connection prepared its pick from the head.
	preparedAt := func() time.Time {
		t.Helper()
		var at time.Time
		if err := s.Pool().QueryRow(ctx, `SELECT prepare_time FROM pg_prepared_statements
			WHERE statement LIKE '%WITH picked AS%' AND statement NOT LIKE '%(run_at, id) >%'
			AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	start := time.Now()
	claims(12) // more than the five custom plans before a generic one
	made := preparedAt()
	if p := plan(); !strings.Contains(p, "Seq Scan on backstop_tasks c") {
		// The premise: on a table of a few tasks the scan is the cheaper plan.
		t.Fatalf("the generic plan made on a small table does not scan it:\n%s", p)
	}
	// The table grows (a history of 30,000 finished tasks).
	if _, err := s.Pool().Exec(ctx, `INSERT INTO backstop_tasks (id, queue, kind, state, max_attempts, attempt,
		payload, run_at, created_at, updated_at, finalized_at, event_links)
		SELECT 'h-' || lpad(g::text, 9, '0'), 'other', 'k', 'succeeded', 3, 1, '{"n":1}', now(), now(), now(), now(),
			ARRAY[1::bigint] FROM generate_series(1, 30000) g`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(start.Add(first + 50*time.Millisecond)))
	claims(12)
	if again := preparedAt(); !again.After(made) {
		t.Errorf("the claim statement prepared at %s was not prepared again after the first period (%s), %s later",
			made, first, time.Since(start))
	}
	if p := plan(); !strings.Contains(p, "Tid Scan on backstop_tasks c") || strings.Contains(p, "Seq Scan on backstop_tasks c") {
		t.Errorf("after the first period, on a table of 30,000 tasks, the claim's generic plan does not find the rows by their tids:\n%s", p)
	}
}

// storeWithPool opens the test database's store with a pool of at most
// conns connections (one: its prepared statements, in
// pg_prepared_statements, are the store's). Closed at the test's end.
func storeWithPool(t *testing.T, b *testBundle, conns int) *pgstore.Store {
	t.Helper()
	sep := map[bool]string{true: "&", false: "?"}[strings.Contains(b.url, "?")]
	s, err := pgstore.Open(t.Context(), fmt.Sprintf("%s%spool_max_conns=%d", b.url, sep, conns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// sqlArray is a text array literal of f(1) … f(n), quoted for SQL text.
func sqlArray(n int, f func(int) string) string {
	var els []string
	for i := 1; i <= n; i++ {
		els = append(els, f(i))
	}
	return "'{" + strings.Join(els, ",") + "}'"
}
