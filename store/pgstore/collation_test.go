package pgstore_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// icuEnUS is the collation of most packaged and hosted servers'
// databases, where text compares by ICU unless a column says COLLATE "C".
const icuEnUS = "icu-en-US"

// byteOrderVersion is the migration that gives names and ids byte order.
const byteOrderVersion = 67

// mixedIDs are task ids whose byte order differs from en-US order.
var mixedIDs = []string{"a-b", "a.b", "a0", "a:b", "aB", "a_b", "aa", "Ab", "B", "b", "Z", "z-1", "z1", "Z_"}

// storeIn is a store on a fresh schema of locale's database
// (testdb.PostgresLocale), migrated up to version (0: every migration).
func storeIn(t *testing.T, locale string, version int64) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(t.Context(), testdb.PostgresLocale(t, locale))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if version == 0 {
		err = s.Migrate(t.Context())
	} else {
		err = s.MigrateTo(t.Context(), version)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// listIDs is every id of queue (all queues: "") page by page (3 a page).
func listIDs(t *testing.T, s store.Store, queue string, newest bool) []string {
	t.Helper()
	var out []string
	f := store.ListFilter{Queue: queue, Newest: newest, Limit: 3}
	for {
		ts, err := s.List(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ids(ts)...)
		if len(ts) < f.Limit {
			return out
		}
		f.AfterID = ts[len(ts)-1].ID
	}
}

// nameCollations maps table.column to its collation ("default" for the
// database's) for every text (or text array) column in the key of a btree
// or GIN index of Backstop's tables.
func nameCollations(t *testing.T, s *pgstore.Store) map[string]string {
	t.Helper()
	rows, err := s.Pool().Query(t.Context(), `
SELECT DISTINCT c.relname || '.' || a.attname, CASE WHEN a.attcollation = 100 THEN 'default' ELSE co.collname END
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_am am ON am.oid = i.relam
JOIN pg_class c ON c.oid = x.indrelid
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY ((x.indkey::int2[])[0:x.indnkeyatts - 1])
JOIN pg_collation co ON co.oid = a.attcollation
WHERE c.relnamespace = current_schema()::regnamespace AND am.amname IN ('btree', 'gin') AND c.relname LIKE 'backstop\_%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var col, coll string
		if err := rows.Scan(&col, &coll); err != nil {
			t.Fatal(err)
		}
		out[col] = coll
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// keptDefault are the indexed text columns that keep the database's
// collation: fixed words, hashes, the events log's type, and free text
// (the dead letters' errors, in a trigram index).
var keptDefault = []string{
	"backstop_tasks.last_error",
	"backstop_tasks.state", "backstop_tasks.dlq_status", "backstop_task_counts.state", "backstop_task_counts.dlq_status",
	"backstop_dlq_group_counts.dlq_status", "backstop_redrive_items.outcome", "backstop_runs.state",
	"backstop_redrives.filter_key", "backstop_workflows.plan_hash", "backstop_events.type",
}

// Every text column a btree or GIN index of Backstop's tables keys by
// compares by its bytes (COLLATE "C") after the migrations, in a C
// database and in an ICU en-US one, but for those of keptDefault.
func TestNamesCollateC(t *testing.T) {
	t.Parallel()
	for _, locale := range []string{"", icuEnUS} {
		s := storeIn(t, locale, 0)
		got := nameCollations(t, s)
		for _, col := range []string{"backstop_tasks.id", "backstop_tasks.queue", "backstop_tasks.kind",
			"backstop_tasks.merge_key", "backstop_tasks.idempotency_key", "backstop_executions.task_id",
			"backstop_payloads.task_id", "backstop_task_counts.queue", "backstop_events.subjects"} {
			if got[col] != "C" {
				t.Errorf("%q: %s collates %q, want C", locale, col, got[col])
			}
		}
		for col, coll := range got {
			if want := "C"; coll != want && !slices.Contains(keptDefault, col) {
				t.Errorf("%q: %s collates %q, want %s", locale, col, coll, want)
			}
		}
	}
}

// The migration to byte order on an ICU en-US database holding data of
// the version before it: no rewrite of the tasks table, the names and ids
// in "C", the run index without the step tasks, the views back; tasks
// claimed before settle after, the kept counts hold, lists page by bytes;
// and down and up again.
func TestByteOrderNamesMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	before := pgstore.MigrationBefore(byteOrderVersion)
	s := storeIn(t, icuEnUS, before)
	seedCounts(t, s, 300)
	var tasks []*bt.Task
	for i, id := range mixedIDs {
		tk := newTask([]string{"Mq", "m-q", "m_q"}[i%3])
		tk.ID = id
		tk.Attributes = map[string]string{"run_id": "r1"}
		tasks = append(tasks, tk)
	}
	for i := range 4 {
		tk := newTask("m-q")
		tk.ID = fmt.Sprintf("r1.step%d", i)
		tk.Attributes = map[string]string{"run_id": "r1"}
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	running := claim(t, s, "z", 12, t0.Add(time.Minute))
	checkKept(t, s, fmt.Sprint("at ", before))

	var file0 uint32
	if err := s.Pool().QueryRow(ctx, `SELECT pg_relation_filenode('backstop_tasks')`).Scan(&file0); err != nil {
		t.Fatal(err)
	}
	// The event log's arrays: their compression and storage (00011), kept
	// through the change of type, which resets them.
	eventColumns := func() string {
		t.Helper()
		var v string
		if err := s.Pool().QueryRow(ctx, `SELECT string_agg(attname || ':' || attstorage::text || ':' || attcompression::text, ' ' ORDER BY attname)
			FROM pg_attribute WHERE attrelid = 'backstop_events'::regclass AND attname IN ('subjects', 'ids', 'queues', 'kinds')`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	events0 := eventColumns()
	step := func(what string, to int64, down bool) {
		t.Helper()
		var err error
		if down {
			err = s.MigrateDownTo(ctx, to)
		} else {
			err = s.MigrateTo(ctx, to)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		checkKept(t, s, what)
		for _, v := range []string{"backstop_pending_retries", "backstop_dead_letters", "backstop_retry_exhausted", "backstop_recent_failures"} {
			var n int
			if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM "+v).Scan(&n); err != nil {
				t.Fatalf("%s: view %s: %v", what, v, err)
			}
		}
		var coll, runIndex string
		if err := s.Pool().QueryRow(ctx, `SELECT CASE WHEN attcollation = 100 THEN 'default' ELSE attcollation::regcollation::text END,
			pg_get_indexdef('backstop_tasks_run'::regclass)
			FROM pg_attribute WHERE attrelid = 'backstop_tasks'::regclass AND attname = 'id'`).Scan(&coll, &runIndex); err != nil {
			t.Fatal(err)
		}
		wantColl, narrow := `"C"`, true
		if to < byteOrderVersion {
			wantColl, narrow = "default", false // an ICU database's ids do not sort by bytes
		}
		if coll != wantColl || strings.Contains(runIndex, "starts_with") != narrow {
			t.Fatalf("%s: id collates %s, run index %s; want %s, without the step tasks: %v", what, coll, runIndex, wantColl, narrow)
		}
		if got := eventColumns(); got != events0 {
			t.Fatalf("%s: the events' arrays are %s, were %s", what, got, events0)
		}
		// The task history's read of the events by the ids of task rows
		// (tasksEventRows) looks them up in the GIN index on subjects:
		// the ids and the subjects share a collation.
		var plan string
		if err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `EXPLAIN SELECT xid FROM backstop_events
				WHERE link IS NULL AND subjects && (SELECT array_agg(id) FROM backstop_tasks WHERE queue = 'm-q')`)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			plan = strings.Join(lines, "\n")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan, "Index Cond: (subjects && ") {
			t.Fatalf("%s: the events of task rows are not looked up by the subjects' index:\n%s", what, plan)
		}
		var run []string
		for _, tk := range listIDs(t, s, "", false) {
			if got := get(t, s, tk); got.Attributes["run_id"] == "r1" {
				run = append(run, tk)
			}
		}
		if len(run) != len(tasks) {
			t.Fatalf("%s: %d tasks of the run listed, want %d", what, len(run), len(tasks))
		}
		rs, err := s.List(ctx, store.ListFilter{Attrs: map[string]string{"run_id": "r1"}, Limit: 100})
		if err != nil || len(rs) != len(tasks) {
			t.Fatalf("%s: the run's tasks: %d, %v; want %d", what, len(rs), err, len(tasks))
		}
	}

	step("up", byteOrderVersion, false)
	var file1 uint32
	if err := s.Pool().QueryRow(ctx, `SELECT pg_relation_filenode('backstop_tasks')`).Scan(&file1); err != nil || file1 != file0 {
		t.Fatalf("the tasks table was rewritten: file %d, was %d (%v)", file1, file0, err)
	}
	want := slices.Clone(mixedIDs)
	slices.Sort(want)
	var got []string
	for _, id := range listIDs(t, s, "", false) {
		if slices.Contains(mixedIDs, id) {
			got = append(got, id)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v, want byte order %v", got, want)
	}
	// Claimed before the migration, settled after: the lease still holds.
	if applied := settle(t, s, append(succeeded(running[:4]...), killed("after", t0.Add(2*time.Minute), running[4:6]...)...)...); slices.Contains(applied, false) {
		t.Fatalf("settles of tasks claimed before the migration: %v", applied)
	}
	checkKept(t, s, "settled after")
	got2 := claim(t, s, "m-q", 100, t0.Add(2*time.Minute))
	settle(t, s, succeeded(got2...)...)

	step("down", before, true)
	if applied := settle(t, s, succeeded(running[6:9]...)...); slices.Contains(applied, false) {
		t.Fatalf("settles after down: %v", applied)
	}
	step("up again", byteOrderVersion, false)
	settle(t, s, killed("up again", t0.Add(3*time.Minute), running[9:]...)...)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := s.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile: %+v %v, want nothing to correct", d, err)
	}
}
