package engine_test

import (
	"context"
	"testing"

	"github.com/backstophq/backstop"
)

// TestWorkflowBatchStartRoundTripsPostgres: on PostgreSQL a batch start
// (RunWorkflows) of 100 and of 1000 runs writes every run row, step row,
// first task and event in a few round trips, whatever the batch's size
// (not one or more per run); 100 runs (200 events) in one.
func TestWorkflowBatchStartRoundTripsPostgres(t *testing.T) {
	ctx := context.Background()
	c, rt := countedLinearClient(t)
	for i, runs := range []int{100, 100, 1000, 1000} {
		ps := make([]backstop.RunWorkflowParams, runs)
		for j := range ps {
			ps[j] = backstop.RunWorkflowParams{Workflow: "linear"}
		}
		before := rt.n.Load()
		got, err := c.RunWorkflows(ctx, ps)
		if err != nil || len(got) != runs {
			t.Fatalf("batch %d: %d runs, %v", i, len(got), err)
		}
		n := rt.n.Load() - before
		t.Logf("batch %d of %d runs: %d round trips", i, runs, n)
		if i%2 == 1 && n > maxBatchStartTrips {
			t.Errorf("a batch start of %d runs took %d round trips; want at most %d", runs, n, maxBatchStartTrips)
		}
		if i == 1 && n != 1 {
			t.Errorf("a batch start of %d runs took %d round trips; want 1 (one pipeline: BEGIN, the writes, COMMIT)", runs, n)
		}
	}
}

// maxBatchStartTrips: seen 9 (1000 runs; 100 runs was 7 before the
// pipeline took 256 rows); one statement per run was 106 and 1008.
const maxBatchStartTrips = 10
