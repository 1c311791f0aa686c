package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Migration 00041 on a database of the version before it: a run's tasks
// are those whose run_id attribute is the run's, as the version before
// listed them, now read through the run index (in id order, no sort).
func TestRunIndexMigration(t *testing.T) {
	ctx := context.Background()
	s, _ := storeAt(t, 34)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	runs := []string{"run-1", "run-10", "run-2"}
	var tasks []*bt.Task
	for i := range 300 {
		tk := &bt.Task{ID: fmt.Sprintf("ri-%04d", i), Queue: "ri", Kind: "k", State: bt.StatePending,
			MaxAttempts: 1, Payload: json.RawMessage(`{}`), RunAt: t0, CreatedAt: t0, UpdatedAt: t0}
		if i%7 != 0 {
			tk.Attributes = map[string]string{"run_id": runs[i%3], "n": fmt.Sprint(i % 2)}
		}
		tasks = append(tasks, tk)
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	filters := []store.ListFilter{
		{Attrs: map[string]string{"run_id": "run-1"}, Limit: 1000},
		{Attrs: map[string]string{"run_id": "run-10"}, Limit: 1000, Newest: true, WithoutPayload: true},
		{Attrs: map[string]string{"run_id": "run-2", "n": "1"}, Limit: 1000},
		{Attrs: map[string]string{"run_id": "run-3"}, Limit: 1000},
	}
	list := func() [][]string {
		t.Helper()
		var out [][]string
		for _, f := range filters {
			got, err := s.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			ids := []string{}
			for _, tk := range got {
				ids = append(ids, tk.ID)
			}
			out = append(out, ids)
		}
		return out
	}
	before := list()
	if len(before[0]) < 50 || len(before[2]) < 20 || !slices.IsSorted(before[0]) {
		t.Fatalf("a poor fixture: %v", before)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if after := list(); !slices.EqualFunc(after, before, slices.Equal) {
		t.Fatalf("after the migration: %v, want %v", after, before)
	}
	where, args := listWhere(filters[0])
	plan := sqlitePlan(t, s, `SELECT id FROM backstop_tasks WHERE `+strings.Join(where, " AND ")+` ORDER BY id LIMIT 100`, args...)
	if !strings.Contains(plan, "backstop_tasks_run") || strings.Contains(plan, "TEMP B-TREE") {
		t.Fatalf("a run's tasks are not read through the run index in id order:\n%s", plan)
	}
}
