package api_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/store"
)

// TestWorkerEndpoints: a remote worker is registered by its claim, listed
// and shown (with its executions) to viewers, filtered by queue and state,
// paged, and goes stale when it stops being seen.
func TestWorkerEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op := b.as[api.RoleViewer], b.as[api.RoleOperator]
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "mail", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		c := claimOne(t, op, "mail") // worker remote-1
		if _, err := op.Heartbeat(ctx, c.ID, api.HeartbeatRequest{LeaseToken: c.LeaseToken, WorkerID: "remote-1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken}); err != nil {
			t.Fatal(err)
		}
		if _, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"sms"}, WorkerID: "remote-2"}); err != nil {
			t.Fatal(err)
		}
		if err := b.store.RegisterWorker(ctx, store.WorkerInfo{ID: "local-1", Host: "h", PID: 7, Queues: []string{"mail"},
			StartedAt: b.clock.Now()}); err != nil {
			t.Fatal(err)
		}

		l, err := viewer.Workers(ctx, nil)
		if err != nil || len(l.Items) != 3 || l.NextCursor != nil {
			t.Fatalf("workers: %+v %v", l, err)
		}
		r1 := l.Items[1]
		if r1.ID != "remote-1" || !r1.Remote || r1.State != backstop.WorkerActive || len(r1.Queues) != 1 || r1.Queues[0] != "mail" ||
			r1.Host != "127.0.0.1" {
			t.Fatalf("remote-1: %+v", r1)
		}
		l, err = viewer.Workers(ctx, url.Values{"queue": {"mail"}, "limit": {"1"}})
		if err != nil || len(l.Items) != 1 || l.Items[0].ID != "local-1" || l.NextCursor == nil {
			t.Fatalf("page 1: %+v %v", l, err)
		}
		l, err = viewer.Workers(ctx, url.Values{"queue": {"mail"}, "limit": {"1"}, "after": {*l.NextCursor}})
		if err != nil || len(l.Items) != 1 || l.Items[0].ID != "remote-1" {
			t.Fatalf("page 2: %+v %v", l, err)
		}
		d, err := viewer.Worker(ctx, "remote-1")
		if err != nil || len(d.Executions) != 1 || d.Executions[0].TaskID != c.ID || d.Executions[0].Outcome != backstop.OutcomeSucceeded {
			t.Fatalf("worker remote-1: %+v %v", d, err)
		}
		_, err = viewer.Worker(ctx, "nope")
		mustCode(t, err, "not_found")
		_, err = viewer.Workers(ctx, url.Values{"state": {"bogus"}})
		mustCode(t, err, "invalid_input")
		_, err = viewer.Workers(ctx, url.Values{"color": {"red"}})
		mustCode(t, err, "invalid_query")

		b.clock.Advance(2 * time.Minute)
		l, err = viewer.Workers(ctx, url.Values{"state": {"stale"}})
		if err != nil || len(l.Items) != 3 {
			t.Fatalf("stale workers: %+v %v", l, err)
		}
	})
}
