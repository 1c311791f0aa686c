package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/store"
)

// runTimes gives a task n executions (each a transient failure, retried
// at once) through the store, as n workers' attempts would.
func runTimes(t *testing.T, b *bundle, queue, id string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		now := b.clock.Now()
		got, err := b.store.Claim(ctx, store.ClaimParams{Queue: queue, WorkerID: "w", Max: 1, Now: now, Lease: time.Minute})
		if err != nil || len(got) != 1 || got[0].ID != id {
			t.Fatalf("claim %d: %v %v", i, got, err)
		}
		if _, err := b.store.Settle(ctx, []store.Settlement{{TaskID: id, ExecutionID: got[0].ExecutionID,
			Outcome: backstop.OutcomeTransientError, Error: "boom", FinishedAt: now, State: backstop.StatePending, RunAt: now}}); err != nil {
			t.Fatal(err)
		}
	}
}

// GET /v1/tasks/{id} and GET /v1/dlq/{id} answer a window of the
// executions: the newest 100 by default, oldest first, with the total and
// the cursor of the older ones; paging with executions_before walks them
// all once, in order. A task with few executions answers as before (all
// of them, executions_next null). Bad windows are 400 naming the parameter.
func TestTaskExecutionsWindow(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(t *testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		ctx := context.Background()
		viewer := b.as[api.RoleViewer]
		r, err := b.lib.Enqueue(ctx, backstop.EnqueueParams{Queue: "ex", Kind: "k", MaxAttempts: 1000})
		if err != nil {
			t.Fatal(err)
		}
		id := r.Task.ID
		runTimes(t, b, "ex", id, 3)
		d, err := viewer.Show(ctx, id, false, backstop.ExecutionWindow{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Executions == nil || len(*d.Executions) != 3 || d.ExecutionsTotal != 3 || d.ExecutionsNext != nil {
			t.Fatalf("3 executions: %d shown, total %d, next %v", len(*d.Executions), d.ExecutionsTotal, d.ExecutionsNext)
		}

		runTimes(t, b, "ex", id, 247)
		var attempts []int
		win := backstop.ExecutionWindow{}
		var sizes []int
		for page := 0; ; page++ {
			if page > 5 {
				t.Fatal("paging does not end")
			}
			d, err := viewer.Show(ctx, id, false, win)
			if err != nil {
				t.Fatal(err)
			}
			ex := *d.Executions
			if d.ExecutionsTotal != 250 {
				t.Fatalf("executions_total %d, want 250", d.ExecutionsTotal)
			}
			sizes = append(sizes, len(ex))
			var a []int
			for _, e := range ex {
				a = append(a, e.Attempt)
			}
			attempts = append(a, attempts...)
			if d.ExecutionsNext == nil {
				break
			}
			if *d.ExecutionsNext != ex[0].ExecutionID {
				t.Fatalf("executions_next %q, want the oldest shown, %q", *d.ExecutionsNext, ex[0].ExecutionID)
			}
			win = backstop.ExecutionWindow{Before: *d.ExecutionsNext}
		}
		if len(sizes) != 3 || sizes[0] != 100 || sizes[1] != 100 || sizes[2] != 50 {
			t.Fatalf("page sizes %v, want [100 100 50]", sizes)
		}
		for i, a := range attempts {
			if a != i+1 {
				t.Fatalf("attempts over the pages: %v, want 1..250 in order", attempts)
			}
		}
		if d, err := viewer.Show(ctx, id, false, backstop.ExecutionWindow{Limit: 7}); err != nil || len(*d.Executions) != 7 ||
			(*d.Executions)[6].Attempt != 250 || d.ExecutionsNext == nil {
			t.Fatalf("executions_limit=7: %v", err)
		}

		// The dead letter's page windows its executions the same way.
		now := b.clock.Now()
		got, err := b.store.Claim(ctx, store.ClaimParams{Queue: "ex", WorkerID: "w", Max: 1, Now: now, Lease: time.Minute})
		if err != nil || len(got) != 1 {
			t.Fatal(got, err)
		}
		if _, err := b.store.Settle(ctx, []store.Settlement{{TaskID: id, ExecutionID: got[0].ExecutionID,
			Outcome: backstop.OutcomePermanentError, Error: "no", FinishedAt: now, State: backstop.StateDead,
			DeadReason: backstop.ReasonPermanentError}}); err != nil {
			t.Fatal(err)
		}
		var dl api.DeadLetterView
		if err := viewer.Do(ctx, "GET", "/v1/dlq/"+id+"?executions_limit=2", nil, &dl); err != nil {
			t.Fatal(err)
		}
		if len(*dl.Executions) != 2 || dl.ExecutionsTotal != 251 || (*dl.Executions)[1].Attempt != 251 || dl.ExecutionsNext == nil {
			t.Fatalf("dlq window: %d shown, total %d", len(*dl.Executions), dl.ExecutionsTotal)
		}

		for _, q := range []string{"executions_limit=0", "executions_limit=1001", "executions_limit=x", "executions_before=nosuch"} {
			err := viewer.Do(ctx, "GET", "/v1/tasks/"+id+"?"+q, nil, nil)
			var p *api.Problem
			if !errors.As(err, &p) || p.Status != http.StatusBadRequest {
				t.Errorf("%s: %v, want 400", q, err)
			}
		}
	})
}
