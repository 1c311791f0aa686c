package pgstore_test

import (
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A success writes no backstop_executions row (migration 00016): the task
// row holds its last attempt, and Executions and WorkerExecutions read it
// from there, by both settle statements (the all-success batch and the
// general one). A success already in backstop_executions (recorded before
// 00016) is listed once.
func TestSucceededExecutionLivesInTaskRow(t *testing.T) {
	b := setup(t)
	s := b.store
	ctx := t.Context()
	fast, mixed, failing, old := newTask("sx"), newTask("sx"), newTask("sx"), newTask("sx")
	enqueue(t, s, store.EnqueueOpts{}, fast, mixed, failing, old)
	tasks := claim(t, s, "sx", 4, t0)
	if len(tasks) != 4 {
		t.Fatalf("claimed %d", len(tasks))
	}
	byID := map[string]*bt.Task{}
	for _, c := range tasks {
		byID[c.ID] = c
	}
	done := t0.Add(3 * time.Second)
	win := func(task *bt.Task) store.Settlement {
		c := byID[task.ID]
		return store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: done, State: bt.StateSucceeded}
	}
	settle(t, s, win(fast))                    // the all-success statement
	settle(t, s, win(mixed), store.Settlement{ // the general statement
		TaskID: failing.ID, ExecutionID: byID[failing.ID].ExecutionID, Outcome: bt.OutcomeTransientError,
		Error: "boom", FinishedAt: done, State: bt.StateScheduled, RunAt: done.Add(time.Minute)})
	settle(t, s, win(old))
	// old succeeded before 00016: its success is in the table as well.
	if _, err := s.Pool().Exec(ctx, `INSERT INTO backstop_executions
		(execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome)
		SELECT execution_id, id, attempt, worker_id, attempted_at, finalized_at, 'succeeded'
		FROM backstop_tasks WHERE id = $1`, old.ID); err != nil {
		t.Fatal(err)
	}

	var rows int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM backstop_executions WHERE task_id = ANY($1)`,
		[]string{fast.ID, mixed.ID}).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d execution rows written for two successes, want 0", rows)
	}
	for _, task := range []*bt.Task{fast, mixed, old} {
		c := byID[task.ID]
		ex, err := s.Executions(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(ex) != 1 {
			t.Fatalf("%s: %d executions %+v, want 1", task.ID, len(ex), ex)
		}
		e := ex[0]
		if e.ExecutionID != c.ExecutionID || e.TaskID != task.ID || e.Attempt != 1 || e.WorkerID != c.WorkerID ||
			!e.StartedAt.Equal(t0) || e.FinishedAt == nil || !e.FinishedAt.Equal(done) ||
			e.Outcome != bt.OutcomeSucceeded || e.Error != "" || e.ErrorDetail != "" {
			t.Fatalf("%s: execution %+v (claim %+v)", task.ID, e, c)
		}
	}
	if ex, err := s.Executions(ctx, failing.ID); err != nil || len(ex) != 1 || ex[0].Outcome != bt.OutcomeTransientError {
		t.Fatalf("failed attempt: %+v %v", ex, err)
	}

	// The worker's recent executions: the four attempts, once each.
	ex, err := s.WorkerExecutions(ctx, store.WorkerExecutionFilter{WorkerID: tasks[0].WorkerID, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range ex {
		seen[e.ExecutionID]++
	}
	if len(ex) != 4 || len(seen) != 4 {
		t.Fatalf("worker executions %+v, want the 4 attempts once each", ex)
	}
	if ex, err := s.WorkerExecutions(ctx, store.WorkerExecutionFilter{WorkerID: tasks[0].WorkerID, Limit: 2}); err != nil || len(ex) != 2 {
		t.Fatalf("limit 2: %+v %v", ex, err)
	}
}
