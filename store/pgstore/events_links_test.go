package pgstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// The hot path's event rows (enqueued, claimed, started, succeeded) are
// linked from their tasks' event_links and stay out of the GIN index on
// subjects (migration 00015); a task's events are still found by index
// on a large log, and deleting the tasks deletes them.
func TestHotEventsLinked(t *testing.T) {
	b := setup(t)
	s, ctx, pool := b.store, t.Context(), b.store.Pool()
	const n = 50
	tasks := make([]*bt.Task, n)
	for i := range tasks {
		tasks[i] = newTask("links")
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	got := claim(t, s, "links", n, t0)
	if len(got) != n {
		t.Fatalf("claimed %d of %d", len(got), n)
	}
	st := make([]store.Settlement, n)
	for i, c := range got {
		st[i] = store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Second), State: bt.StateSucceeded}
	}
	for i, ok := range settle(t, s, st...) {
		if !ok {
			t.Fatalf("settlement %d not applied", i)
		}
	}

	// Four linked rows, in the order written, and no unlinked one.
	rows, err := pool.Query(ctx, `SELECT type, link IS NOT NULL, seq, coalesce(link, 0) FROM backstop_events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	var seqs, links []int64
	for rows.Next() {
		var (
			typ       string
			linked    bool
			seq, link int64
		)
		if err := rows.Scan(&typ, &linked, &seq, &link); err != nil {
			t.Fatal(err)
		}
		if !linked {
			t.Errorf("%s row %d is not linked", typ, seq)
		}
		types = append(types, typ)
		seqs = append(seqs, seq)
		links = append(links, link)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "task.enqueued task.claimed task.started task.succeeded"; strings.Join(types, " ") != want {
		t.Fatalf("rows %v, want %s", types, want)
	}
	// The enqueue and the claim link their rows by seq; the settle's two
	// rows share one link.
	if links[0] != seqs[0] || links[1] != seqs[1] || links[2] != links[3] {
		t.Fatalf("links %v of rows %v", links, seqs)
	}
	for _, task := range tasks {
		var es []int64
		if err := pool.QueryRow(ctx, `SELECT event_links FROM backstop_tasks WHERE id = $1`, task.ID).Scan(&es); err != nil {
			t.Fatal(err)
		}
		if len(es) != 3 || es[0] != links[0] || es[1] != links[1] || es[2] != links[2] {
			t.Fatalf("task %s event_links %v, want %v", task.ID, es, links[:3])
		}
	}
	// Nothing went into the partial GIN: a lookup through it finds no row.
	var inGin int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM backstop_events WHERE link IS NULL AND subjects @> ARRAY[$1]`,
		tasks[0].ID).Scan(&inGin); err != nil {
		t.Fatal(err)
	}
	if inGin != 0 {
		t.Fatalf("%d unlinked rows hold a hot-path task's events", inGin)
	}

	// A log of 50,000 more events (unlinked one-element rows for other
	// tasks, and linked rows): a task's read still goes by index.
	if _, err := pool.Exec(ctx, `INSERT INTO backstop_events (type, time, subjects, queues, kinds, attributes, bodies, link)
		SELECT 'task.progress', now(), ARRAY['other-' || g], ARRAY['q'], ARRAY['k'], json_build_array(NULL::json),
			json_build_array('{}'::json), CASE WHEN g % 2 = 0 THEN g END
		FROM generate_series(1, 50000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE backstop_events`); err != nil {
		t.Fatal(err)
	}
	{
		plan := explain(t, pool, `EXPLAIN SELECT 1 FROM `+pgstore.TaskEventRows("$1::text"), tasks[0].ID)
		if strings.Contains(plan, "Seq Scan on backstop_events") {
			t.Fatalf("a task's rows are read by a sequential scan:\n%s", plan)
		}
		if !strings.Contains(plan, "backstop_events_link") || !strings.Contains(plan, "backstop_events_subjects_unlinked") {
			t.Fatalf("a task's rows are not read through both indexes:\n%s", plan)
		}
	}
	// The task stream and the history read return the four events.
	page, err := s.ReadEvents(ctx, store.EventQuery{Stream: store.Stream{Kind: store.StreamTask, Value: tasks[3].ID}, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got4 []string
	for _, e := range page.Events {
		got4 = append(got4, e.Type)
	}
	if want := "task.enqueued task.claimed task.started task.succeeded"; strings.Join(got4, " ") != want {
		t.Fatalf("task stream %v, want %s", got4, want)
	}

	// Retention deletes the tasks and their linked rows.
	if _, err := s.DeleteFinished(ctx, bt.StateSucceeded, t0.Add(time.Hour), 1000); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM backstop_events WHERE type <> 'task.progress'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d linked rows left after the tasks were deleted", left)
	}
}

func explain(t *testing.T, pool *pgxpool.Pool, q string, args ...any) string {
	t.Helper()
	rows, err := pool.Query(t.Context(), q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
