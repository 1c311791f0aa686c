package pgstore

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// TestScanTaskAllocations: a claimed task's row scans with three
// allocations (the task with its times, its two ids in one string, its
// payload), whatever else the row holds that is interned or empty; and
// the ids are the claim's. Not parallel: AllocsPerRun counts the
// process's allocations.
func TestScanTaskAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector (sync.Pool drops what is put back)")
	}
	ctx := t.Context()
	s, err := Open(ctx, testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const n = 101
	var tasks []*bt.Task
	for i := range n {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("sa-%03d", i), Queue: "sa", Kind: "k", State: bt.StatePending,
			MaxAttempts: 3, Payload: json.RawMessage(`{}`), RunAt: at, CreatedAt: at, UpdatedAt: at})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, store.ClaimParams{Queue: "sa", WorkerID: "w-sa", Max: n, Now: at, Lease: time.Minute})
	if err != nil || len(claimed) != n {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	execs := map[string]string{}
	for _, c := range claimed {
		execs[c.ID] = c.ExecutionID
	}
	q := "SELECT " + taskCols("t") + " FROM backstop_tasks t WHERE t.queue = 'sa' ORDER BY t.id LIMIT $1"
	var scanned []*bt.Task
	read := func(limit int) {
		scanned = scanned[:0]
		rows, err := s.pool.Query(ctx, q, limit)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			tk, err := scanTask(rows)
			if err != nil {
				t.Fatal(err)
			}
			scanned = append(scanned, tk)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	scanned = make([]*bt.Task, 0, n)
	one := testing.AllocsPerRun(20, func() { read(1) })
	all := testing.AllocsPerRun(20, func() { read(n) })
	if perRow := (all - one) / (n - 1); perRow > 3 {
		t.Errorf("a claimed row scans with %.2f allocations, want 3 (task, ids, payload)", perRow)
	}
	for i, tk := range scanned {
		if want := fmt.Sprintf("sa-%03d", i); tk.ID != want || tk.ExecutionID != execs[want] || tk.ExecutionID == "" {
			t.Fatalf("row %d: id %q execution %q, want %q %q", i, tk.ID, tk.ExecutionID, want, execs[want])
		}
	}
}
