package api_test

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// TestWorkerExecutionsPaged: GET /v1/workers/{id}/executions pages a
// worker's executions newest first (limit up to 1000, a next cursor that
// leads to the older ones, null on the last page) and filters them by
// outcome; the worker's current_execution_ids name what it runs now.
// Bad input is 400 naming the parameter; an unknown worker is 404.
func TestWorkerExecutionsPaged(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op := b.as[api.RoleViewer], b.as[api.RoleOperator]
		// Five attempts by worker w: fail, ok, fail, ok, and one it still runs.
		var want []string // execution ids, newest first
		for i := range 5 {
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "wx", Kind: "k", MaxAttempts: 1}); err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(time.Second)
			ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"wx"}, WorkerID: "w", Max: 1})
			if err != nil || len(ts) != 1 {
				t.Fatalf("claim %d: %v %v", i, ts, err)
			}
			c := ts[0]
			want = append([]string{c.ExecutionID}, want...)
			switch i {
			case 0, 2:
				_, err = op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: bt.OutcomePermanentError, Error: "no"})
			case 1, 3:
				_, err = op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken})
			case 4:
				d, err := viewer.Worker(ctx, "w")
				if err != nil || len(d.CurrentExecutionIDs) != 1 || d.CurrentExecutionIDs[0] != c.ExecutionID {
					t.Fatalf("worker w while it runs %s: current %v, %v", c.ExecutionID, d.CurrentExecutionIDs, err)
				}
				l, err := viewer.Workers(ctx, nil)
				if err != nil || len(l.Items) != 1 || len(l.Items[0].CurrentExecutionIDs) != 1 {
					t.Fatalf("workers while w runs: %+v %v", l, err)
				}
				_, err = op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken})
			}
			if err != nil {
				t.Fatalf("settle %d: %v", i, err)
			}
		}
		if d, err := viewer.Worker(ctx, "w"); err != nil || d.CurrentExecutionIDs == nil || len(d.CurrentExecutionIDs) != 0 {
			t.Fatalf("worker w idle: current %v, %v", d.CurrentExecutionIDs, err)
		}

		// Pages of two: 2, 2, 1, the last with no cursor.
		var got []string
		q := url.Values{"limit": {"2"}}
		for page := 0; ; page++ {
			l, err := viewer.WorkerExecutions(ctx, "w", q)
			if err != nil {
				t.Fatalf("page %d: %v", page, err)
			}
			for _, e := range l.Items {
				got = append(got, e.ExecutionID)
			}
			if l.NextCursor == nil {
				break
			}
			if page > 5 {
				t.Fatal("pages never end")
			}
			q.Set("after", *l.NextCursor)
		}
		if len(got) != len(want) {
			t.Fatalf("paged executions %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("paged executions %v, want %v", got, want)
			}
		}
		l, err := viewer.WorkerExecutions(ctx, "w", url.Values{"limit": {"1"}})
		if err != nil || len(l.Items) != 1 || l.NextCursor == nil {
			t.Fatalf("limit=1: %+v %v", l, err)
		}
		l, err = viewer.WorkerExecutions(ctx, "w", url.Values{"limit": {"1000"}, "outcome": {"permanent_error"}})
		if err != nil || len(l.Items) != 2 || l.Items[0].ExecutionID != want[2] || l.Items[1].ExecutionID != want[4] || l.NextCursor != nil {
			t.Fatalf("outcome=permanent_error: %+v %v", l, err)
		}
		l, err = viewer.WorkerExecutions(ctx, "w", url.Values{"outcome": {"succeeded"}, "limit": {"2"}})
		if err != nil || len(l.Items) != 2 || l.Items[0].ExecutionID != want[0] || l.Items[1].ExecutionID != want[1] || l.NextCursor == nil {
			t.Fatalf("outcome=succeeded page 1: %+v %v", l, err)
		}
		l, err = viewer.WorkerExecutions(ctx, "w", url.Values{"outcome": {"succeeded"}, "limit": {"2"}, "after": {*l.NextCursor}})
		if err != nil || len(l.Items) != 1 || l.Items[0].ExecutionID != want[3] || l.Items[0].Outcome != backstop.OutcomeSucceeded {
			t.Fatalf("outcome=succeeded page 2: %+v %v", l, err)
		}

		for _, bad := range []url.Values{
			{"limit": {"1001"}}, {"limit": {"0"}}, {"limit": {"x"}}, {"outcome": {"nope"}},
			{"after": {"garbage"}}, {"after": {strconv.Itoa(-1) + "_x"}}, {"color": {"red"}},
			{"limit": {"1", "2"}},
		} {
			_, err := viewer.WorkerExecutions(ctx, "w", bad)
			if got := problemCode(t, err); got != "invalid_query" && got != "invalid_input" && got != "invalid_cursor" {
				t.Errorf("%v: %v, want a 400", bad, err)
			}
		}
		for _, id := range []string{"nope", "bad\x00id", "bad\x01id"} {
			_, err = viewer.WorkerExecutions(ctx, id, nil)
			mustCode(t, err, "not_found")
		}
	})
}
