package sqlitestore

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Migration 00054 on a database holding dead letters of two queues and
// three groups, some redriven before it (counted by the triggers row by
// row): after it a redrive batch counts its own rows (the triggers skip
// them while it is marked: the batch changes a few count rows, not
// several a replayed row), and the task counts and the groups stay those
// of the rows through redrives, a death and a single replay after it, a
// migration down (the triggers count every row again) and up again.
func TestRedriveCountsItselfMigration(t *testing.T) {
	ctx := t.Context()
	s, p := storeAt(t, 52)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var tasks []*bt.Task
	for i := range 80 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("rc-%02d", i), Queue: []string{"x", "y"}[i%2], Kind: "k",
			State: bt.StatePending, MaxAttempts: 1, RunAt: at, CreatedAt: at, UpdatedAt: at})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"x", "y"} {
		killDead(t, s, q, 40, at.Add(time.Hour), at, "boom", "timeout", "")
	}
	check := func(what string) {
		t.Helper()
		qs, err := s.CountByQueue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := scanCounts(t, s); !reflect.DeepEqual(qs, want) {
			t.Fatalf("%s: counts %+v, want %+v", what, qs, want)
		}
		checkGroupsAgainstRows(t, s, what, at.Add(1000*time.Hour),
			store.ListFilter{}, store.ListFilter{DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
			store.ListFilter{Queue: "x", DLQStatuses: []bt.DLQStatus{bt.DLQOpen}})
	}
	rec, _, err := s.StartRedrive(ctx, store.Redrive{ID: "rd-1", Kind: store.JobRedrive, FilterKey: "k", Filter: json.RawMessage(`{}`),
		Snapshot: at.Add(2 * time.Hour), StartedAt: at.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	b := store.RedriveBatch{RedriveID: rec.ID, Filter: store.ListFilter{Queue: "x"}, Snapshot: at.Add(2 * time.Hour),
		RunAt: at.Add(2 * time.Hour), State: bt.StatePending, Now: at.Add(2 * time.Hour), Actor: "test"}
	// changes is how many rows a batch of n changed, the triggers' included.
	batch := func(n int) (replayed int, changes int64) {
		t.Helper()
		var c0, c1 int64
		if err := s.w.QueryRowContext(ctx, `SELECT total_changes()`).Scan(&c0); err != nil {
			t.Fatal(err)
		}
		b.Limit = n
		res, err := s.RedriveBatch(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.w.QueryRowContext(ctx, `SELECT total_changes()`).Scan(&c1); err != nil {
			t.Fatal(err)
		}
		b.AfterID = res.LastID
		return res.Replayed, c1 - c0
	}
	if n, _ := batch(10); n != 10 {
		t.Fatalf("replayed %d, want 10", n)
	}
	check("redriven before 00054")

	if _, err := p.UpTo(ctx, 54); err != nil {
		t.Fatal(err)
	}
	s.replayPerRow.Store(false)
	check("migrated")
	n, changes := batch(20)
	if n != 20 {
		t.Fatalf("replayed %d, want 20", n)
	}
	// 20 tasks, 20 items, 20 events, the record, the mark in and out,
	// three groups' counts and two count rows (69), not the triggers'
	// rows for every replayed task as well (122 without the mark).
	if changes > 3*20+12 {
		t.Errorf("a batch of 20 changed %d rows; want its own rows and a few counts (the triggers skipped)", changes)
	}
	check("redriven after 00054")
	var marks int
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM backstop_counted_batch`).Scan(&marks); err != nil || marks != 0 {
		t.Fatalf("%d marks left after the batch (%v), want none", marks, err)
	}
	// A death, and a single replay (the triggers count both), then the rest.
	killDead(t, s, "x", 1, at.Add(3*time.Hour), at.Add(3*time.Hour), "again")
	if _, err := s.Replay(ctx, "rc-78", func(*bt.Task) (*store.ReplayPlan, error) {
		return &store.ReplayPlan{State: bt.StatePending, RunAt: at.Add(3 * time.Hour), Now: at.Add(3 * time.Hour)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	check("a death and a replay")
	b.Filter.Queue, b.AfterID = "y", ""
	for {
		if n, _ := batch(7); n == 0 {
			break
		}
	}
	check("queue y redriven")

	if _, err := p.DownTo(ctx, 52); err != nil {
		t.Fatal(err)
	}
	s.replayPerRow.Store(true)
	check("migrated down")
	b.Filter.Queue, b.AfterID = "x", ""
	if n, _ := batch(5); n != 5 {
		t.Fatalf("replayed %d after down, want 5", n)
	}
	check("redriven after down")
	if _, err := p.UpTo(ctx, 54); err != nil {
		t.Fatal(err)
	}
	s.replayPerRow.Store(false)
	if n, _ := batch(500); n == 0 {
		t.Fatal("nothing left to replay")
	}
	check("applied again")
}
