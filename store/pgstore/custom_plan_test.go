package pgstore_test

import (
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// The settle and heartbeat statements are planned for each batch, never run
// from a generic plan: a generic plan is made once per connection, from
// the table's size when it was made, and kept. Made while the table was
// small (a new database, the first seconds of a worker), it hash-joined
// the batch against a scan of the whole table, and every later settle
// scanned every row kept.
func TestSettleAndHeartbeatNeverGenericPlans(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	// One connection, so that its prepared statements can be read.
	s, err := pgstore.Open(ctx, b.url+"&pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const n = 12 // more than the five custom plans before a generic one
	var tasks []*bt.Task
	for range 3 * n {
		tasks = append(tasks, newTask("plan"))
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	claimed := claim(t, s, "plan", 3*n, t0)
	if len(claimed) != 3*n {
		t.Fatalf("claimed %d, want %d", len(claimed), 3*n)
	}
	done := t0.Add(time.Second)
	for i, c := range claimed {
		switch {
		case i < n: // a heartbeat of one, then of two
			if _, err := s.Heartbeat(ctx, []store.Beat{{TaskID: c.ID, ExecutionID: c.ExecutionID}}, done, done.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			other := claimed[i+n]
			if _, err := s.Heartbeat(ctx, []store.Beat{{TaskID: c.ID, ExecutionID: c.ExecutionID},
				{TaskID: other.ID, ExecutionID: other.ExecutionID}}, done, done.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			settle(t, s, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded,
				FinishedAt: done, State: bt.StateSucceeded})
		case i < 2*n: // the general statement
			settle(t, s, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeTransientError,
				Error: "boom", FinishedAt: done, State: bt.StateScheduled, RunAt: done.Add(time.Minute)})
		}
	}

	rows, err := s.Pool().Query(ctx, `SELECT left(regexp_replace(statement, '\s+', ' ', 'g'), 60), generic_plans, custom_plans
		FROM pg_prepared_statements WHERE statement LIKE '%WITH input AS%' AND statement NOT LIKE '%pg_prepared_statements%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			stmt            string
			generic, custom int64
		)
		if err := rows.Scan(&stmt, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		if generic > 0 {
			t.Errorf("%q ran %d times from a generic plan (%d custom)", stmt, generic, custom)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
