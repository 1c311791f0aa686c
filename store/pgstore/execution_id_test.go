package pgstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A claim's execution ids are unique, read as uuids, share the claim's
// prefix and take their last 12 hex digits from backstop_execution_seq:
// one random uuid per claim, not one per row.
func TestClaimExecutionIDs(t *testing.T) {
	t.Parallel()
	s := storeAt(t, 60)
	var tasks []*bt.Task
	for range 300 {
		tasks = append(tasks, newTask("exec-ids"))
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	seen := map[string]bool{}
	prefixes := map[string]bool{}
	for i := range 3 {
		got := claim(t, s, "exec-ids", 100, t0.Add(time.Duration(i)*time.Second))
		if len(got) != 100 {
			t.Fatalf("claim %d: %d tasks, want 100", i, len(got))
		}
		prefix := ""
		for _, tk := range got {
			id := tk.ExecutionID
			if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
				t.Fatalf("execution id %q does not read as a uuid: %v", id, err)
			}
			if seen[id] {
				t.Fatalf("execution id %q given twice", id)
			}
			seen[id] = true
			if prefix == "" {
				prefix = id[:24]
			}
			if id[:24] != prefix {
				t.Fatalf("claim %d: execution ids %q and %q do not share the claim's prefix %q", i, tk.ExecutionID, prefix+"…", prefix)
			}
		}
		prefixes[prefix] = true
	}
	if len(prefixes) != 3 {
		t.Fatalf("three claims had %d prefixes", len(prefixes))
	}
	// The suffixes are values the sequence handed out.
	var last int64
	if err := s.Pool().QueryRow(t.Context(), `SELECT last_value FROM backstop_execution_seq`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	for id := range seen {
		v, err := strconv.ParseInt(id[24:], 16, 64)
		if err != nil || v < 1 || v > last {
			t.Fatalf("execution id %q: suffix not a value of backstop_execution_seq (last %d): %v", id, last, err)
		}
	}
}

// Migration 00060 on a database holding tasks claimed before it: their
// leases (random uuid execution ids) still settle, new claims take ids
// from the sequence, and the migration rolls back and forward again.
func TestExecutionSeqMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storeAt(t, 58)
	var tasks []*bt.Task
	for range 40 {
		tasks = append(tasks, newTask("exec-seq"))
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	// Ten tasks running under leases as the claim before 00060 wrote them.
	rows, err := s.Pool().Query(ctx, `UPDATE backstop_tasks SET state = 'running', attempt = 1, worker_id = 'w',
		execution_id = gen_random_uuid()::text, attempted_at = $1, lease_expires_at = $2
		WHERE id = ANY($3) RETURNING id, execution_id`, t0, t0.Add(time.Minute), ids(tasks[:10]))
	if err != nil {
		t.Fatal(err)
	}
	var before []*bt.Task
	for rows.Next() {
		tk := &bt.Task{}
		if err := rows.Scan(&tk.ID, &tk.ExecutionID); err != nil {
			t.Fatal(err)
		}
		before = append(before, tk)
	}
	if rows.Err() != nil || len(before) != 10 {
		t.Fatalf("%d running before the migration (%v)", len(before), rows.Err())
	}
	if err := s.MigrateTo(ctx, 60); err != nil {
		t.Fatal(err)
	}
	for _, tk := range before {
		ok := settle(t, s, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(time.Second), State: bt.StateSucceeded})
		if !ok[0] {
			t.Fatalf("task %s claimed before the migration did not settle under its lease %s", tk.ID, tk.ExecutionID)
		}
	}
	after := claim(t, s, "exec-seq", 10, t0.Add(2*time.Second))
	if len(after) != 10 || after[0].ExecutionID[:24] != after[9].ExecutionID[:24] {
		t.Fatalf("claim after the migration: %d tasks, ids %v", len(after), after)
	}
	if err := s.MigrateDownTo(ctx, 58); err != nil {
		t.Fatal(err)
	}
	var gone bool
	if err := s.Pool().QueryRow(ctx, `SELECT to_regclass('backstop_execution_seq') IS NULL`).Scan(&gone); err != nil || !gone {
		t.Fatalf("after the rollback: backstop_execution_seq still there (%v)", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tk := range after {
		settle(t, s, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: t0.Add(3 * time.Second), State: bt.StateSucceeded})
	}
	if got := claim(t, s, "exec-seq", 100, t0.Add(4*time.Second)); len(got) != 20 {
		t.Fatalf("last claim: %d tasks, want the 20 left", len(got))
	}
	var succeeded int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM backstop_tasks WHERE queue = 'exec-seq' AND state = 'succeeded'`).Scan(&succeeded); err != nil || succeeded != 20 {
		t.Fatalf("%d succeeded, want 20 (%v)", succeeded, err)
	}
}
