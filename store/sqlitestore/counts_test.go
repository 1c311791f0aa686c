package sqlitestore

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// scanCounts is a count of every task by queue, state and dead-letter
// status: the grouped scan CountByQueue made before the counts were kept.
func scanCounts(t *testing.T, s *Store) []store.QueueCounts {
	t.Helper()
	rows, err := s.reader().Query(t.Context(), sqldialect.SQLCountByQueue)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := sqldialect.ScanQueueCounts("scan", rows)
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

// Migration 00048 on a database holding tasks of several states: the kept
// counts start as their count (the oldest pending run_at as the scan's,
// over two priorities), the writes after it move them, a reconciliation
// finds nothing to correct — and corrects counts made wrong behind the
// triggers' back.
func TestKeptCountsMigration(t *testing.T) {
	ctx := context.Background()
	s, p := storeAt(t, 47)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var tasks []*bt.Task
	for i := range 30 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("kc-%02d", i), Queue: []string{"a", "b", "c"}[i%3], Kind: "k",
			State: bt.StatePending, Priority: i % 2, MaxAttempts: 1, RunAt: at.Add(time.Duration(i) * time.Second),
			CreatedAt: at, UpdatedAt: at})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, store.ClaimParams{Queue: "a", WorkerID: "w", Max: 4, Now: at.Add(time.Hour), Lease: time.Minute})
	if err != nil || len(got) != 4 {
		t.Fatalf("claim: %d %v", len(got), err)
	}
	if _, err := s.Settle(ctx, []store.Settlement{
		{TaskID: got[0].ID, ExecutionID: got[0].ExecutionID, Outcome: bt.OutcomeSucceeded, FinishedAt: at, State: bt.StateSucceeded},
		{TaskID: got[1].ID, ExecutionID: got[1].ExecutionID, Outcome: bt.OutcomePermanentError, Error: "x", FinishedAt: at,
			State: bt.StateDead, DeadReason: bt.ReasonPermanentError},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 48); err != nil {
		t.Fatal(err)
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
	}
	check("migrated")
	if _, err := s.Settle(ctx, []store.Settlement{{TaskID: got[2].ID, ExecutionID: got[2].ExecutionID, Outcome: bt.OutcomeSucceeded,
		FinishedAt: at, State: bt.StateSucceeded}}); err != nil {
		t.Fatal(err)
	}
	check("written after")
	if d, err := s.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile: %+v %v", d, err)
	}
	if _, err := s.w.ExecContext(ctx, `UPDATE backstop_task_counts SET n = n + 2 WHERE queue = 'b' AND state = 'pending'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO backstop_task_counts VALUES ('ghost', 'running', '', 1)`); err != nil {
		t.Fatal(err)
	}
	if d, err := s.ReconcileCounts(ctx); err != nil || d != (store.CountDrift{Groups: 2, Tasks: 3}) {
		t.Fatalf("reconcile: %+v %v, want 2 groups, 3 tasks", d, err)
	}
	check("reconciled")
	if _, err := p.DownTo(ctx, 47); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 48); err != nil {
		t.Fatal(err)
	}
	check("applied again")
}
