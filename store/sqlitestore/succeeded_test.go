package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// enqueueClaimed enqueues n tasks of queue q (ids q-0, q-1, …) and claims
// them as worker w1 at t0.
func enqueueClaimed(t *testing.T, s *Store, q string, n int, t0 time.Time) []*bt.Task {
	t.Helper()
	var tasks []*bt.Task
	for i := range n {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("%s-%d", q, i), Queue: q, Kind: "k", State: bt.StatePending,
			MaxAttempts: 3, Payload: json.RawMessage(`{}`), RunAt: t0, CreatedAt: t0, UpdatedAt: t0})
	}
	if _, err := s.Enqueue(t.Context(), tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(t.Context(), store.ClaimParams{Queue: q, WorkerID: "w1", Max: n, Now: t0, Lease: time.Minute})
	if err != nil || len(got) != n {
		t.Fatalf("claim: %d %v", len(got), err)
	}
	return got
}

// succeededFixture enqueues four tasks of queue sx, claims them as worker
// w1 at t0 and settles them at t0+3s: fast by the all-success statement,
// mixed with failing (a retry) by the general one, old alone. It returns
// the claimed tasks by id, in that order.
func succeededFixture(t *testing.T, s *Store, t0 time.Time) []*bt.Task {
	t.Helper()
	ctx := t.Context()
	got := enqueueClaimed(t, s, "sx", 4, t0)
	done := t0.Add(3 * time.Second)
	win := func(c *bt.Task) store.Settlement {
		return store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: done, State: bt.StateSucceeded}
	}
	fast, mixed, failing, old := got[0], got[1], got[2], got[3]
	for _, batch := range [][]store.Settlement{
		{win(fast)}, // the all-success statement
		{win(mixed), {TaskID: failing.ID, ExecutionID: failing.ExecutionID, Outcome: bt.OutcomeTransientError, // the general one
			Error: "boom", FinishedAt: done, State: bt.StateScheduled, RunAt: done.Add(time.Minute)}},
		{win(old)},
	} {
		if applied, err := s.Settle(ctx, batch); err != nil || len(applied) != len(batch) || !applied[0] {
			t.Fatalf("settle: %v %v", applied, err)
		}
	}
	return got
}

// A success writes no backstop_executions row: the task row holds its
// last attempt, and Executions and WorkerExecutions read it from there, by
// both settle statements (the all-success batch and the general one). A
// success already in backstop_executions (recorded before migration
// 00049) is listed once.
func TestSucceededExecutionLivesInTaskRow(t *testing.T) {
	ctx := t.Context()
	s, _ := storeAt(t, 1<<40) // every migration
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	got := succeededFixture(t, s, t0)
	fast, mixed, failing, old := got[0], got[1], got[2], got[3]
	// old succeeded before 00049: its success is in the table as well.
	if _, err := s.w.ExecContext(ctx, `INSERT INTO backstop_executions
		(execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome)
		SELECT execution_id, id, attempt, worker_id, attempted_at, finalized_at, 'succeeded'
		FROM backstop_tasks WHERE id = ?`, old.ID); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM backstop_executions WHERE task_id IN (?, ?)`,
		fast.ID, mixed.ID).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d execution rows written for two successes, want 0", rows)
	}
	checkSucceededExecutions(t, s, t0, fast, mixed, failing, old)
}

// checkSucceededExecutions: each success is listed once with its attempt's
// fields by Executions, the failed attempt too, and the worker's
// executions are the four attempts once each, paged and filtered.
func checkSucceededExecutions(t *testing.T, s *Store, t0 time.Time, fast, mixed, failing, old *bt.Task) {
	t.Helper()
	ctx := t.Context()
	done := t0.Add(3 * time.Second)
	for _, c := range []*bt.Task{fast, mixed, old} {
		ex, err := s.Executions(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(ex) != 1 {
			t.Fatalf("%s: %d executions %+v, want 1", c.ID, len(ex), ex)
		}
		e := ex[0]
		if e.ExecutionID != c.ExecutionID || e.TaskID != c.ID || e.Attempt != 1 || e.WorkerID != "w1" ||
			!e.StartedAt.Equal(t0) || e.FinishedAt == nil || !e.FinishedAt.Equal(done) ||
			e.Outcome != bt.OutcomeSucceeded || e.Error != "" || e.ErrorDetail != "" {
			t.Fatalf("%s: execution %+v (claim %+v)", c.ID, e, c)
		}
	}
	if ex, err := s.Executions(ctx, failing.ID); err != nil || len(ex) != 1 || ex[0].Outcome != bt.OutcomeTransientError {
		t.Fatalf("failed attempt: %+v %v", ex, err)
	}
	if task, err := s.Get(ctx, mixed.ID); err != nil || len(task.Executions) != 1 || task.Executions[0].ExecutionID != mixed.ExecutionID {
		t.Fatalf("Get: %+v %v", task, err)
	}

	// The worker's executions: the four attempts once each, and in pages
	// of one across both kinds of rows.
	all := func(f store.WorkerExecutionFilter) []string {
		t.Helper()
		var out []string
		for {
			ex, err := s.WorkerExecutions(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ex {
				out = append(out, e.ExecutionID)
			}
			if len(ex) < f.Limit || f.Limit >= 10 {
				return out
			}
			last := ex[len(ex)-1]
			f.Before = &store.ExecutionKey{StartedAt: last.StartedAt, ExecutionID: last.ExecutionID}
		}
	}
	seen := map[string]int{}
	whole := all(store.WorkerExecutionFilter{WorkerID: "w1", Limit: 10})
	for _, id := range whole {
		seen[id]++
	}
	if len(whole) != 4 || len(seen) != 4 {
		t.Fatalf("worker executions %v, want the 4 attempts once each", whole)
	}
	if paged := all(store.WorkerExecutionFilter{WorkerID: "w1", Limit: 1}); fmt.Sprint(paged) != fmt.Sprint(whole) {
		t.Fatalf("pages of one %v, want %v", paged, whole)
	}
	if ex, err := s.WorkerExecutions(ctx, store.WorkerExecutionFilter{WorkerID: "w1", Limit: 2}); err != nil || len(ex) != 2 {
		t.Fatalf("limit 2: %+v %v", ex, err)
	}
	if ok := all(store.WorkerExecutionFilter{WorkerID: "w1", Limit: 10, Outcome: bt.OutcomeSucceeded}); len(ok) != 3 {
		t.Fatalf("succeeded only: %v, want 3", ok)
	}
	if bad := all(store.WorkerExecutionFilter{WorkerID: "w1", Limit: 10, Outcome: bt.OutcomeTransientError}); len(bad) != 1 || bad[0] != failing.ExecutionID {
		t.Fatalf("failed only: %v, want [%s]", bad, failing.ExecutionID)
	}
}

// Migration 00049 on a file holding successes recorded the old way (an
// execution row each): every attempt is listed once after it, and rolled
// back, the successes the rows hold are execution rows again.
func TestSucceededExecutionsMigration(t *testing.T) {
	ctx := context.Background()
	s, p := storeAt(t, 47)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	got := succeededFixture(t, s, t0)
	// The version before 00049 wrote an execution row for each success.
	if _, err := s.w.ExecContext(ctx, `INSERT INTO backstop_executions
		(execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome)
		SELECT execution_id, id, attempt, worker_id, attempted_at, finalized_at, 'succeeded'
		FROM backstop_tasks WHERE state = 'succeeded'`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	checkSucceededExecutions(t, s, t0, got[0], got[1], got[2], got[3])

	// A success after the migration, then down: its row is written.
	if _, err := s.w.ExecContext(ctx, `DELETE FROM backstop_executions WHERE task_id = ?`, got[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 47); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM backstop_executions WHERE outcome = 'succeeded'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 3 {
		t.Fatalf("%d succeeded execution rows after the rollback, want 3", rows)
	}
	checkSucceededExecutions(t, s, t0, got[0], got[1], got[2], got[3])
}

// The success settle seeks each task's row by the row id its execution
// id names, not through the id index; a row whose row id changed since
// its claim (a VACUUM may renumber rows) is still settled, found by its
// id, and a stale lease is still refused.
func TestSettleSeeksByRowid(t *testing.T) {
	ctx := t.Context()
	s, _ := storeAt(t, 1<<40)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	got := enqueueClaimed(t, s, "rw", 4, t0)
	for _, c := range got {
		var rowid int64
		if err := s.r.QueryRowContext(ctx, `SELECT rowid FROM backstop_tasks WHERE id = ?`, c.ID).Scan(&rowid); err != nil {
			t.Fatal(err)
		}
		if r := executionRowid(c.ExecutionID); r != rowid {
			t.Fatalf("%s: execution id %s names row %d, the row is %d", c.ID, c.ExecutionID, r, rowid)
		}
	}
	for _, bad := range []string{"", "x", got[0].ExecutionID[:35] + "g", got[0].ExecutionID + "0"} {
		if r := executionRowid(bad); r != -1 {
			t.Errorf("executionRowid(%q) = %d, want -1", bad, r)
		}
	}
	// got[1]'s row moves; got[2]'s lease is not the one settled.
	if _, err := s.w.ExecContext(ctx, `UPDATE backstop_tasks SET rowid = rowid + 1000000 WHERE id = ?`, got[1].ID); err != nil {
		t.Fatal(err)
	}
	var ss []store.Settlement
	for i, c := range got {
		x := c.ExecutionID
		if i == 2 {
			x = got[3].ExecutionID[:24] + "000000000000"
		}
		ss = append(ss, store.Settlement{TaskID: c.ID, ExecutionID: x, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Second), State: bt.StateSucceeded})
	}
	applied, err := s.Settle(ctx, ss)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(applied) != "[true true false true]" {
		t.Fatalf("applied %v, want [true true false true]", applied)
	}
	for i, c := range got {
		var state string
		if err := s.r.QueryRowContext(ctx, `SELECT state FROM backstop_tasks WHERE id = ?`, c.ID).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: "succeeded", false: "running"}[i != 2]; state != want {
			t.Errorf("%s is %s, want %s", c.ID, state, want)
		}
	}

	// The plan: each row by its row id; by id only in the second pass.
	for _, byRowid := range []bool{true, false} {
		plan := sqlitePlan(t, s, settleSucceededSQL(3, byRowid), make([]any, 15+3*map[bool]int{true: 1}[byRowid])...)
		if seeks := strings.Contains(plan, "INTEGER PRIMARY KEY (rowid=?)"); seeks != byRowid {
			t.Errorf("by row id %v: the settle's plan:\n%s", byRowid, plan)
		}
	}
}

// A claimed task carries every field it has set, the rarely set ones
// (claimExtra) included, as the task read back whole has them; a task
// that sets none claims with their defaults.
func TestClaimReturnsRareFields(t *testing.T) {
	ctx := t.Context()
	s, _ := storeAt(t, 1<<40)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	deadline := t0.Add(time.Hour)
	full := &bt.Task{ID: "cf-full", Queue: "cf", Kind: "k", State: bt.StatePending, MaxAttempts: 5,
		Payload: json.RawMessage(`{"a":1}`), RunAt: t0, CreatedAt: t0, UpdatedAt: t0, Priority: 3,
		Attributes: map[string]string{"tenant": "t1"}, Timeout: bt.Duration(90 * time.Second), Deadline: &deadline,
		Retry: &bt.RetryPolicy{Base: bt.Duration(3 * time.Second), Factor: 1.5}, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		IdempotencyKey: "idem-1", Complexity: 2.5}
	plain := &bt.Task{ID: "cf-plain", Queue: "cf", Kind: "k", State: bt.StatePending, MaxAttempts: 1,
		Payload: json.RawMessage(`{}`), RunAt: t0, CreatedAt: t0, UpdatedAt: t0}
	if _, err := s.Enqueue(ctx, []*bt.Task{full, plain}, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	// What only other paths set: progress, a last error, merges, deaths, replays.
	if _, err := s.w.ExecContext(ctx, `UPDATE backstop_tasks SET progress_total = 10, progress_completed = 4,
		last_error = 'boom "quoted"', merge_key = 'mk', merge_count = 2, dead_count = 1, replay_count = 1,
		replayed_from = 'cf-old' WHERE id = ?`, full.ID); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, store.ClaimParams{Queue: "cf", WorkerID: "w1", Max: 2, Now: t0, Lease: time.Minute})
	if err != nil || len(got) != 2 {
		t.Fatalf("claim: %d %v", len(got), err)
	}
	for _, c := range got {
		w, err := getTask(ctx, s.r, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		pick := func(x *bt.Task) string {
			return fmt.Sprintf("%s %s %d %d %d %s %d %v %v %s %v %v %v %v %v %v %s %s %s %s %s %d %d %d %s",
				x.ID, x.Kind, x.Priority, x.Attempt, x.MaxAttempts, x.Payload, x.PayloadSize, x.PayloadSpilled, x.Attributes,
				x.RunAt.UTC(), x.CreatedAt.UTC(), x.Timeout, x.Deadline, x.Retry, x.Progress, x.Complexity, x.TraceParent,
				x.LastError, x.ExecutionID, x.IdempotencyKey, x.MergeKey, x.MergeCount, x.DeadCount, x.ReplayCount, x.ReplayedFrom)
		}
		if a, b := pick(c), pick(w); a != b {
			t.Errorf("claimed:\n%s\nthe row:\n%s", a, b)
		}
	}
	if got[0].ID != full.ID || got[0].Deadline == nil || got[0].Retry == nil || got[0].LastError != `boom "quoted"` {
		t.Errorf("the full task claimed as %+v", got[0])
	}
}

// Every row of a claim is found by its row id: the second pass, by id, is
// for the exceptions only.
func TestSettleByRowidFindsEveryClaimedRow(t *testing.T) {
	ctx := t.Context()
	s, _ := storeAt(t, 1<<40)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var tasks []*bt.Task
	for i := range 1200 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("rf-%04d", i), Queue: "rf", Kind: "k", State: bt.StatePending,
			MaxAttempts: 3, Payload: json.RawMessage(`{}`), RunAt: t0, CreatedAt: t0, UpdatedAt: t0})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	var ss []store.Settlement
	for range 3 {
		got, err := s.Claim(ctx, store.ClaimParams{Queue: "rf", WorkerID: "w1", Max: 400, Now: t0, Lease: time.Minute})
		if err != nil || len(got) != 400 {
			t.Fatalf("claim: %d %v", len(got), err)
		}
		for _, c := range got {
			ss = append(ss, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded,
				FinishedAt: t0.Add(time.Second), State: bt.StateSucceeded})
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	for start := 0; start < len(ss); start += settleChunk {
		var chunk []int
		for i := start; i < min(start+settleChunk, len(ss)); i++ {
			chunk = append(chunk, i)
		}
		rows, err := settleSucceededChunk(ctx, tx, ss, chunk, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(chunk) {
			t.Fatalf("by row id: %d of %d rows settled", len(rows), len(chunk))
		}
	}
}

// executionRowid reads any text a settlement names: -1 or a 48-bit row
// id, never a panic; an id built as a claim builds it gives its row id
// back.
func FuzzExecutionRowid(f *testing.F) {
	f.Add("019abcde-0123-7456-89ab-", int64(1))
	f.Add("", int64(0))
	f.Add("019abcde-0123-7456-89ab-0000000000ff", int64(rowidMask))
	f.Fuzz(func(t *testing.T, s string, rowid int64) {
		if r := executionRowid(s); r != -1 && (r < 0 || r > rowidMask) {
			t.Fatalf("executionRowid(%q) = %d", s, r)
		}
		if len(s) < 24 {
			return
		}
		prefix := s[:24]
		rowid &= rowidMask
		id := prefix + fmt.Sprintf("%012x", (rowid+executionOffset(prefix))&rowidMask)
		if r := executionRowid(id); r != rowid {
			t.Fatalf("%s names row %d, want %d", id, r, rowid)
		}
	})
}

// The success settle returns only what its settlements do not say: the
// changed row's key, the attempt and what the events carry, not the task
// id, the execution id or the finish time it was given.
func TestSettleReturnsWhatSettlementsDoNotSay(t *testing.T) {
	ctx := t.Context()
	s, _ := storeAt(t, 1<<40)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	for _, byRowid := range []bool{true, false} {
		n := 5 + map[bool]int{true: 1}[byRowid]
		rows, err := tx.QueryContext(ctx, settleSucceededSQL(1, byRowid), make([]any, n)...)
		if err != nil {
			t.Fatal(err)
		}
		cols, err := rows.Columns()
		rows.Close()
		if err != nil {
			t.Fatal(err)
		}
		key := map[bool]string{true: "rowid", false: "execution_id"}[byRowid]
		if len(cols) != 8 || cols[0] != key {
			t.Errorf("by row id %v: the settle returns %d columns %q, want 8, %s first", byRowid, len(cols), cols, key)
		}
		for _, c := range cols[1:] {
			if c == "id" || c == "execution_id" || strings.HasPrefix(c, "finalized_at") {
				t.Errorf("by row id %v: the settle returns %s, which its settlement says", byRowid, c)
			}
		}
	}
}

// Two settlements of one batch naming the same row id (a stale execution
// id whose digits name the row of a current one) settle by their own
// execution ids: the current one applies, the stale one does not, and the
// events name the current attempt.
func TestSettleTwoSettlementsNameOneRowid(t *testing.T) {
	ctx := t.Context()
	s, _ := storeAt(t, 1<<40)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	got := enqueueClaimed(t, s, "tw", 3, t0)
	cur := got[1]
	prefix := "019abcde-0123-7456-89ab-"
	stale := prefix + fmt.Sprintf("%012x", (executionRowid(cur.ExecutionID)+executionOffset(prefix))&rowidMask)
	if executionRowid(stale) != executionRowid(cur.ExecutionID) || stale == cur.ExecutionID {
		t.Fatalf("%s and %s should name one row id", stale, cur.ExecutionID)
	}
	win := func(id, exec string) store.Settlement {
		return store.Settlement{TaskID: id, ExecutionID: exec, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Second), State: bt.StateSucceeded}
	}
	applied, err := s.Settle(ctx, []store.Settlement{win(got[0].ID, got[0].ExecutionID), win(cur.ID, stale),
		win(cur.ID, cur.ExecutionID), win(got[2].ID, got[2].ExecutionID)})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(applied) != "[true false true true]" {
		t.Fatalf("applied %v, want [true false true true]", applied)
	}
	var stales, currents int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE instr(bodies, ?1) > 0),
		count(*) FILTER (WHERE instr(bodies, ?2) > 0) FROM backstop_events WHERE type IN ('task.started', 'task.succeeded')`,
		stale, cur.ExecutionID).Scan(&stales, &currents); err != nil {
		t.Fatal(err)
	}
	if stales != 0 || currents != 2 {
		t.Errorf("event rows naming the stale attempt %d (want 0), the current one %d (want 2)", stales, currents)
	}
}
