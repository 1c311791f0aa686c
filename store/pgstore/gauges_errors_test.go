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

// Migration 00055 on a database holding tasks of every waiting state,
// successes and dead letters written by the version before it (00050):
// the gauges read from the indexes are the grouped scan's, and the error
// filter (now a LIKE the trigram index serves, where the server has
// pg_trgm) selects what strpos selected, wildcards and the escape
// character in the text included; the plans read the indexes. Rolled back
// and applied again, the answers stay.
func TestGaugesAndErrorIndexMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storeAt(t, 50)
	var tasks []*bt.Task
	for i := range 240 {
		tk := newTask(fmt.Sprintf("q%d", i%3))
		tk.ID = fmt.Sprintf("ge-%04d", i)
		tk.Payload = []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("p", i%7)))
		if i%10 == 9 {
			tk.State, tk.RunAt = bt.StateScheduled, t0.Add(time.Hour)
		}
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	for _, q := range []string{"q0", "q1", "q2"} {
		claim(t, s, q, 40, t0)
	}
	errs := []string{"timeout after 30s", "50% off", "a_b", `c:\path`, "card declined", "upstream 503 timeout"}
	killAsBefore(t, s, "'permanent_error'", fmt.Sprintf("(ARRAY['%s'])[substr(id, 4)::int %% %d + 1]",
		strings.Join(func() []string {
			q := slices.Clone(errs)
			for i := range q {
				q[i] = strings.ReplaceAll(q[i], "'", "''")
			}
			return q
		}(), "', '"), len(errs)))
	if _, err := s.Pool().Exec(ctx, `UPDATE backstop_tasks SET dlq_status = 'discarded' WHERE state = 'dead' AND substr(id, 4)::int % 4 = 0`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q0", "q1"} { // some running, some succeeded
		for i, tk := range claim(t, s, q, 6, t0) {
			if i%2 == 0 {
				settle(t, s, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
					FinishedAt: t0.Add(time.Duration(i) * time.Second), State: bt.StateSucceeded})
			}
		}
	}
	// What strpos selected: every dead letter whose error holds the text.
	strpos := func(text string) []string {
		t.Helper()
		rows, err := s.Pool().Query(ctx, `SELECT id FROM backstop_tasks WHERE state = 'dead' AND strpos(last_error, $1) > 0 ORDER BY id`, text)
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
	texts := []string{"timeout", "%", "0% o", "_", "a_b", `\`, `c:\p`, "ti", "no such text", "503 t"}
	want := map[string][]string{}
	for _, x := range texts {
		want[x] = strpos(x)
	}
	byScan, err := s.GaugesByScan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(label string) {
		t.Helper()
		for _, x := range texts {
			page, err := s.List(ctx, store.ListFilter{States: []bt.State{bt.StateDead}, ErrorContains: x, Limit: 1000, WithoutPayload: true})
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, tk := range page {
				got = append(got, tk.ID)
			}
			if !slices.Equal(got, want[x]) {
				t.Errorf("%s: error contains %q: %v, want %v", label, x, got, want[x])
			}
		}
		if len(want["%"]) == 0 || len(want["_"]) == 0 || len(want[`\`]) == 0 || len(want["timeout"]) < 10 || len(want["no such text"]) != 0 {
			t.Fatalf("a poor fixture: %v", want)
		}
		g, err := s.Gauges(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(byScan.Tasks["q0"]) < 5 || len(byScan.OpenDeadLetterBytes) != 3 {
			t.Fatalf("a poor fixture: %+v", byScan)
		}
		jsonEqual(t, label+": gauges", g, byScan)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check("migrated")
	if _, err := s.Pool().Exec(ctx, "VACUUM (ANALYZE) backstop_tasks"); err != nil {
		t.Fatal(err)
	}
	// The gauges read indexes only: no scan of the table.
	p, err := s.ExplainGauges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p, "Seq Scan") || !strings.Contains(p, "backstop_tasks_counts") || !strings.Contains(p, "backstop_tasks_claim") {
		t.Errorf("the gauges do not read the indexes:\n%s", p)
	}
	// With pg_trgm, a dead letter's error text of three characters or
	// more is looked up in the trigram index.
	var trgm bool
	if err := s.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = 'backstop_tasks_dead_error' AND schemaname = current_schema())`).Scan(&trgm); err != nil {
		t.Fatal(err)
	}
	var available bool
	if err := s.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm')`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if available && !trgm {
		t.Fatal("pg_trgm is available but the migration made no trigram index of the errors")
	}
	if trgm {
		// The other indexes of the dead letters dropped (in a transaction
		// rolled back): on a table this small the planner reads them all
		// rather than look the text up.
		p, err := s.ExplainListWithout(ctx, store.ListFilter{States: []bt.State{bt.StateDead}, DLQStatuses: []bt.DLQStatus{bt.DLQOpen},
			ErrorContains: "declined"}, []string{"backstop_tasks_dead", "backstop_tasks_dlq_open", "backstop_tasks_dlq_groups",
			"backstop_tasks_counts", "backstop_tasks_dlq_ungrouped", "backstop_tasks_payload"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p, "backstop_tasks_dead_error") {
			t.Errorf("the error filter does not read the trigram index:\n%s", p)
		}
	}
	// The finished tasks are counted among the newest ones, as the
	// console's counts are: past them the gauges say so.
	s.SetFinishedCounted(1)
	g, err := s.Gauges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Capped, []bt.State{bt.StateCanceled, bt.StateSucceeded}) || g.Tasks["q1"][bt.StateSucceeded]+g.Tasks["q0"][bt.StateSucceeded] != 1 {
		t.Errorf("gauges past the cap: capped %v, succeeded %v %v", g.Capped, g.Tasks["q0"], g.Tasks["q1"])
	}
	s.SetFinishedCounted(pgstore.FinishedCounted)
	if err := s.MigrateDownTo(ctx, 50); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check("applied again")
}

// errorLike escapes LIKE's wildcards and its escape character.
func TestErrorLike(t *testing.T) {
	for in, want := range map[string]string{"timeout": "%timeout%", "50%": `%50\%%`, "a_b": `%a\_b%`, `c:\p`: `%c:\\p%`, "": "%%"} {
		if got := pgstore.ErrorLike(in); got != want {
			t.Errorf("errorLike(%q) = %q, want %q", in, got, want)
		}
	}
}
