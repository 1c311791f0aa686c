package api_test

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// TestLimitEndpoints: PUT, GET and DELETE /v1/limits over real HTTP (every
// response checked against openapi.json): roles, bad input refused naming
// the field with nothing written, a remote worker's claims held to the
// limit, the held-back task's waiting text, 404 for an unknown limit.
func TestLimitEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op := b.as[api.RoleViewer], b.as[api.RoleOperator]
		_, err := viewer.SetLimit(ctx, "one", api.LimitRequest{Queue: "mail", Concurrency: 1})
		mustCode(t, err, "forbidden")
		for _, bad := range []api.LimitRequest{{Queue: "mail"}, {Queue: "bad queue!", Concurrency: 1},
			{Queue: "mail", Per: "a b", Concurrency: 1}, {Queue: "mail", Concurrency: 2_000_000},
			{Queue: "mail", Rate: -1}, {Queue: "mail", Rate: 5, Concurrency: 1}, {Queue: "mail", Rate: 5, Burst: -2},
			{Queue: "mail", Burst: 4}} {
			_, err := op.SetLimit(ctx, "one", bad)
			mustCode(t, err, "invalid_input")
		}
		if ls, err := viewer.Limits(ctx); err != nil || len(ls.Items) != 0 {
			t.Fatalf("limits after bad input: %+v %v", ls, err)
		}
		l, err := op.SetLimit(ctx, "one", api.LimitRequest{Queue: "mail", Kind: "send", Concurrency: 1, Reason: "provider quota"})
		if err != nil || l.Name != "one" || l.Queue != "mail" || l.Kind != "send" || l.Concurrency != 1 || l.CreatedAt.IsZero() {
			t.Fatalf("set: %+v %v", l, err)
		}
		var ids []string
		for range 2 {
			r, err := op.Enqueue(ctx, apiclient.Task{Queue: "mail", Kind: "send"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.Task.ID)
		}
		ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"mail"}, WorkerID: "w", Max: 5})
		if err != nil || len(ts) != 1 {
			t.Fatalf("claimed %d under a limit of 1: %v", len(ts), err)
		}
		waiting := ids[0]
		if ts[0].ID == waiting {
			waiting = ids[1]
		}
		task, err := viewer.Get(ctx, waiting)
		if err != nil || task.Waiting != "concurrency limit one 1/1" || task.Attempt != 0 {
			t.Fatalf("the held-back task: waiting %q attempt %d, %v", task.Waiting, task.Attempt, err)
		}
		ls, err := viewer.Limits(ctx)
		if err != nil || len(ls.Items) != 1 || ls.Items[0].InUse != 1 || ls.Items[0].Waiting != 1 ||
			ls.Items[0].Scope != "queue=mail kind=send" || ls.Items[0].Type != "concurrency" || ls.Items[0].Value != 1 {
			t.Fatalf("limits: %+v %v", ls, err)
		}
		_, err = viewer.RemoveLimit(ctx, "one")
		mustCode(t, err, "forbidden")
		if r, err := op.RemoveLimit(ctx, "one"); err != nil || !r.Removed {
			t.Fatalf("remove: %+v %v", r, err)
		}
		_, err = op.RemoveLimit(ctx, "one")
		mustCode(t, err, "not_found")
		// Without the limit the second task is claimed.
		if ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"mail"}, WorkerID: "w", Max: 5}); err != nil || len(ts) != 1 {
			t.Fatalf("claimed %d after the limit was removed: %v", len(ts), err)
		}

		// A rate limit: a slow rate (one per 100 s) with the default burst
		// of 1 starts one task, and the next says why it waits.
		l, err = op.SetLimit(ctx, "slow", api.LimitRequest{Queue: "news", Rate: 0.01})
		if err != nil || l.Rate != 0.01 || l.Burst != 1 || l.Concurrency != 0 {
			t.Fatalf("set a rate limit: %+v %v", l, err)
		}
		ids = ids[:0]
		for range 2 {
			r, err := op.Enqueue(ctx, apiclient.Task{Queue: "news", Kind: "send"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.Task.ID)
		}
		ts, err = op.Claim(ctx, api.ClaimRequest{Queues: []string{"news"}, WorkerID: "w", Max: 5})
		if err != nil || len(ts) != 1 {
			t.Fatalf("claimed %d under a rate limit with a burst of 1: %v", len(ts), err)
		}
		waiting = ids[0]
		if ts[0].ID == waiting {
			waiting = ids[1]
		}
		if task, err := viewer.Get(ctx, waiting); err != nil || task.Waiting != "rate limit slow 0.01/s" {
			t.Fatalf("the task the rate holds back: waiting %q, %v", task.Waiting, err)
		}
		ls, err = viewer.Limits(ctx)
		if err != nil || len(ls.Items) != 1 || ls.Items[0].Type != "rate" || ls.Items[0].Burst != 1 || ls.Items[0].Tokens == nil ||
			*ls.Items[0].Tokens >= 1 || ls.Items[0].Waiting != 1 {
			t.Fatalf("limits: %+v %v", ls, err)
		}
	})
}
