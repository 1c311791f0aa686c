package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Migration 00029 on a database of the version before it: a worker's
// executions page newest first as before, many of them started in the same
// microsecond, and the page reads the worker index in its order (no sort
// of all the worker's executions); the audit stream answers as before,
// read through the index of actor rows.
func TestConsoleReadsMigration(t *testing.T) {
	ctx := context.Background()
	s, _ := storeAt(t, 28)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for round := range 3 { // three claims, 10 executions started at each instant
		var tasks []*bt.Task
		for i := range 10 {
			tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("we-%d-%d", round, i), Queue: "we", Kind: "k", State: bt.StatePending,
				MaxAttempts: 1, Payload: json.RawMessage(`{}`), RunAt: t0, CreatedAt: t0, UpdatedAt: t0})
		}
		if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
			t.Fatal(err)
		}
		at := t0.Add(time.Duration(round) * time.Second)
		got, err := s.Claim(ctx, store.ClaimParams{Queue: "we", WorkerID: "w1", Max: 10, Now: at, Lease: time.Minute})
		if err != nil || len(got) != 10 {
			t.Fatalf("claim: %d %v", len(got), err)
		}
		var ss []store.Settlement
		for _, tk := range got {
			ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
				Error: "no", FinishedAt: at, State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
		}
		if _, err := s.Settle(ctx, ss); err != nil {
			t.Fatal(err)
		}
	}
	pages := func() [][]string {
		t.Helper()
		var out [][]string
		var before *store.ExecutionKey
		for {
			ex, err := s.WorkerExecutions(ctx, store.WorkerExecutionFilter{WorkerID: "w1", Before: before, Limit: 7})
			if err != nil {
				t.Fatal(err)
			}
			if len(ex) == 0 {
				return out
			}
			var page []string
			for _, e := range ex {
				page = append(page, e.StartedAt.UTC().Format(time.RFC3339Nano)+" "+e.ExecutionID)
			}
			out = append(out, page)
			last := ex[len(ex)-1]
			before = &store.ExecutionKey{StartedAt: last.StartedAt, ExecutionID: last.ExecutionID}
		}
	}
	for i := range 3 {
		if err := s.AppendEvents(ctx, []bt.Event{store.AuditEvent(t0, store.EventQueuePaused, fmt.Sprintf("q%d", i), "ops", "", nil),
			store.NewEvent(t0, "task.enqueued", fmt.Sprintf("e%d", i), "q", "k", "ops", []byte(`{}`))}); err != nil {
			t.Fatal(err)
		}
	}
	audit := func() []string {
		t.Helper()
		st, _ := store.ParseStream("audit")
		var out []string
		after := ""
		for {
			p, err := s.ReadEvents(ctx, store.EventQuery{Stream: st, After: after, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range p.Events {
				out = append(out, e.Type+" "+e.Subject)
			}
			if p.Next == after {
				return out
			}
			after = p.Next
		}
	}
	oldAudit := audit()
	if len(oldAudit) != 3 {
		t.Fatalf("audit before the migration: %v", oldAudit)
	}
	old := pages()
	if n := len(old); n != 5 {
		t.Fatalf("%d pages of 7 for 30 executions: %v", n, old)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pages(); !reflect.DeepEqual(got, old) {
		t.Fatalf("pages after the migration:\n%v\nbefore:\n%v", got, old)
	}
	if got := audit(); !reflect.DeepEqual(got, oldAudit) {
		t.Fatalf("audit after the migration: %v, before %v", got, oldAudit)
	}
	if p := sqlitePlan(t, s, `SELECT seq FROM backstop_events WHERE actor <> '' AND type IN (?, ?) AND seq >= ? ORDER BY seq LIMIT ?`,
		"queue.paused", "token.created", 0, 10); !strings.Contains(p, "backstop_events_actor") {
		t.Errorf("the audit read uses no index of actor rows:\n%s", p)
	}
	for _, f := range []store.WorkerExecutionFilter{
		{WorkerID: "w1", Limit: 20},
		{WorkerID: "w1", Limit: 20, Before: &store.ExecutionKey{StartedAt: t0.Add(time.Second), ExecutionID: "x"}},
	} {
		q, args := workerExecutionsQuery(f)
		if p := sqlitePlan(t, s, q, args...); !strings.Contains(p, "backstop_executions_worker") || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("a page of a worker's executions sorts, or reads no worker index:\n%s", p)
		}
	}
}

// sqlitePlan is EXPLAIN QUERY PLAN of q, one step a line.
func sqlitePlan(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "\n")
}
