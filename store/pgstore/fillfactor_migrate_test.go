package pgstore_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// fillfactorVersion is migration 00070's: backstop_tasks' pages filled
// to 35 % by inserts.
const fillfactorVersion = 70

// Migration 00070 on a database holding tasks, attempts and events (at
// 67, the version before it): backstop_tasks takes fillfactor 35 beside
// its autovacuum settings, the rows are all there, and the queue claims
// and settles as before. Tasks enqueued after it keep their pages through
// their claim (the running version is written beside the pending one)
// and, once the pending version is pruned, through their settle; at the
// default fillfactor a full page sends each new version to another page. Rolled back, the table loses only the
// fillfactor; applied again, it has it again.
func TestTasksFillfactorMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, tasks, got, counts := storeHoldingRows(t, 67, "ff")
	before := counts()
	fillfactor := func() string {
		t.Helper()
		var opts []string
		if err := s.Pool().QueryRow(ctx, `SELECT COALESCE(reloptions, '{}') FROM pg_class
			WHERE relnamespace = current_schema()::regnamespace AND relname = 'backstop_tasks'`).Scan(&opts); err != nil {
			t.Fatal(err)
		}
		for _, o := range opts {
			if v, ok := cutPrefix(o, "fillfactor="); ok {
				return v
			}
		}
		if !slices.Contains(opts, "autovacuum_vacuum_cost_delay=0") {
			t.Errorf("backstop_tasks' options %v lost the unthrottled vacuum (00065)", opts)
		}
		return "default"
	}
	if ff := fillfactor(); ff != "default" {
		t.Fatalf("before: fillfactor %s, want the default", ff)
	}
	// At 67 the updates of a full page move: the control.
	if claimed, settled := keptPages(t, s, "ff-before"); claimed > 10 || settled > 10 {
		t.Errorf("before the migration %d and %d of 100 tasks kept their page through their claim and their settle, want few",
			claimed, settled)
	}

	if err := s.MigrateTo(ctx, fillfactorVersion); err != nil {
		t.Fatal(err)
	}
	if ff := fillfactor(); ff != "35" {
		t.Fatalf("migrated: fillfactor %s, want 35", ff)
	}
	if after := counts(); after[0] != before[0]+100 || after[1] != before[1] {
		t.Fatalf("rows after the migration %v, before %v (and the control's 100 tasks)", after, before)
	}
	more := claim(t, s, "ff", 10, t0.Add(time.Minute))
	if len(more) != 2 || !slices.Contains(ids(more), tasks[2].ID) || !slices.Contains(ids(more), got[1].ID) {
		t.Fatalf("claimed %v after the migration, want the pending task and the retried one", ids(more))
	}
	for _, tk := range more {
		if applied := settle(t, s, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Minute), State: bt.StateSucceeded}); !applied[0] {
			t.Fatalf("settle of %s not applied", tk.ID)
		}
	}
	// The claim's version always fits beside the pending one; the
	// settle's fits once the pending version is pruned, which an older
	// snapshot (another test's transaction on this server) may delay.
	claimed, settled := keptPages(t, s, "ff-after")
	if claimed < 95 {
		t.Errorf("after the migration %d of 100 tasks kept their page through their claim, want at least 95", claimed)
	}
	t.Logf("after the migration %d of 100 tasks kept their page through their claim, %d through their settle too", claimed, settled)

	if err := s.MigrateDownTo(ctx, 67); err != nil {
		t.Fatal(err)
	}
	if ff := fillfactor(); ff != "default" {
		t.Fatalf("rolled back: fillfactor %s, want the default", ff)
	}
	if err := s.MigrateTo(ctx, fillfactorVersion); err != nil {
		t.Fatal(err)
	}
	if ff := fillfactor(); ff != "35" {
		t.Fatalf("applied again: fillfactor %s, want 35", ff)
	}
}

// keptPages enqueues 100 tasks into queue (new pages at the end of the
// table, filled as its fillfactor says), claims them, settles them
// succeeded and reports how many of them were still on the page they
// were inserted into after their claim, and after their settle.
func keptPages(t *testing.T, s *pgstore.Store, queue string) (claimedKept, settledKept int) {
	t.Helper()
	ctx := t.Context()
	tasks := make([]*bt.Task, 100)
	for i := range tasks {
		tasks[i] = newTask(queue)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	pages := func() map[string]string {
		t.Helper()
		rs, err := s.Pool().Query(ctx, `SELECT id, (ctid::text::point)[0]::bigint FROM backstop_tasks WHERE queue = $1`, queue)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		out := map[string]string{}
		for rs.Next() {
			var (
				id   string
				page int64
			)
			if err := rs.Scan(&id, &page); err != nil {
				t.Fatal(err)
			}
			out[id] = fmt.Sprint(page)
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	inserted := pages()
	same := func() int {
		t.Helper()
		n := 0
		for id, page := range pages() {
			if inserted[id] == page {
				n++
			}
		}
		return n
	}
	claimed := claim(t, s, queue, 100, t0.Add(time.Minute))
	claimedKept = same()
	if len(claimed) != 100 {
		t.Fatalf("claimed %d of 100", len(claimed))
	}
	sts := make([]store.Settlement, len(claimed))
	for i, tk := range claimed {
		sts[i] = store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(2 * time.Minute), State: bt.StateSucceeded}
	}
	for i, ok := range settle(t, s, sts...) {
		if !ok {
			t.Fatalf("settle of %s not applied", claimed[i].ID)
		}
	}
	return claimedKept, same()
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return "", false
}
