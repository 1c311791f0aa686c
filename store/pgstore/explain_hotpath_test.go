package pgstore

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// TestExplainHotPath prints EXPLAIN (ANALYZE, BUFFERS) of the claim and of
// the success settle, the drain's two statements, on the database named by
// BACKSTOP_EXPLAIN_URL (skipped without it): 2,000 tasks are enqueued in a
// fresh queue, then three rounds each explain a claim of 10 (rolled back),
// claim 10 for real and explain their settle (rolled back, then settled
// for real); the third
// round's plans are printed, warm. docs/benchmarks.md ("History") reads
// them at an empty and a full history; the tasks stay in the database.
func TestExplainHotPath(t *testing.T) {
	url := os.Getenv("BACKSTOP_EXPLAIN_URL")
	if url == "" {
		t.Skip("BACKSTOP_EXPLAIN_URL is not set")
	}
	ctx := t.Context()
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	queue := "explain-" + uuid.NewString()[:8]
	now := time.Now().UTC()
	tasks := make([]*bt.Task, 2000)
	for i := range tasks {
		tasks[i] = &bt.Task{ID: uuid.Must(uuid.NewV7()).String(), Queue: queue, Kind: "noop", State: bt.StatePending,
			MaxAttempts: 25, Payload: json.RawMessage(`{}`), RunAt: now, CreatedAt: now, UpdatedAt: now}
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	explain := func(sql string, args ...any) string {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
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
	var claimPlan, settlePlan string
	for range 3 {
		at := time.Now()
		claimPlan = explain(sqlClaim, queue, at, 10, "explain", at.Add(time.Minute))
		claimed, err := s.Claim(ctx, store.ClaimParams{Queue: queue, WorkerID: "explain", Max: 10, Now: at, Lease: time.Minute})
		if err != nil || len(claimed) != 10 {
			t.Fatalf("claim: %d tasks, %v", len(claimed), err)
		}
		ids, execs, done := make([]string, 10), make([]string, 10), make([]time.Time, 10)
		for i, c := range claimed {
			ids[i], execs[i], done[i] = c.ID, c.ExecutionID, time.Now()
		}
		args := []any{textArray(ids), textArray(execs), timeArray(done), make([]bool, 10), make([]int32, 10), make([]int32, 10), ""}
		settlePlan = explain(sqlSettleSucceeded, args...)
		// Then settle them for real: nothing is left running.
		if _, err := s.pool.Exec(ctx, sqlSettleSucceeded, args...); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Printf("-- claim (10 of queue %s)\n%s\n-- settle (10 successes)\n%s", queue, claimPlan, settlePlan)
}
