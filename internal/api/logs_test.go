package api_test

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/remote"
)

// TestLogEndpoints: a remote worker appends lines with its lease token;
// viewers page through them or download them as text; a stale token is
// 409 and writes nothing.
func TestLogEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op := b.as[api.RoleViewer], b.as[api.RoleOperator]
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "logs", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		c := claimOne(t, op, "logs")
		res, err := op.AppendLogs(ctx, c.ID, api.LogsRequest{LeaseToken: c.LeaseToken, Lines: []remote.LogLine{
			{Line: "first"}, {Stream: "log", Line: "second"}, {Line: "third"}}})
		if err != nil || res.Accepted != 3 || res.Truncated {
			t.Fatalf("append: %+v %v", res, err)
		}
		_, err = op.AppendLogs(ctx, c.ID, api.LogsRequest{LeaseToken: "wrong", Lines: []remote.LogLine{{Line: "x"}}})
		mustCode(t, err, "lease_not_current")
		_, err = op.AppendLogs(ctx, c.ID, api.LogsRequest{LeaseToken: c.LeaseToken, Lines: []remote.LogLine{{Stream: "x", Line: "x"}}})
		mustCode(t, err, "invalid_input")

		p, err := viewer.Logs(ctx, c.ID, c.ExecutionID, 0, 2)
		if err != nil || len(p.Items) != 2 || p.Items[0].Line != "first" || p.Items[1].Stream != "log" || p.NextCursor == nil || *p.NextCursor != "2" {
			t.Fatalf("page 1: %+v %v", p, err)
		}
		p, err = viewer.Logs(ctx, c.ID, c.ExecutionID, 2, 2)
		if err != nil || len(p.Items) != 1 || p.Items[0].Line != "third" || p.Items[0].Seq != 3 || p.NextCursor != nil {
			t.Fatalf("page 2: %+v %v", p, err)
		}
		st, body := b.raw(t, api.RoleViewer, "GET", "/v1/tasks/"+c.ID+"/executions/"+c.ExecutionID+"/logs?format=text", "", "")
		if st != 200 || string(body) != "first\nsecond\nthird\n" {
			t.Fatalf("text: %d %q", st, body)
		}
		for _, q := range []string{"?format=xml", "?after=-1", "?limit=x", "?color=red"} {
			if st, _ := b.raw(t, api.RoleViewer, "GET", "/v1/tasks/"+c.ID+"/executions/"+c.ExecutionID+"/logs"+q, "", ""); st != 400 {
				t.Errorf("logs%s: %d, want 400", q, st)
			}
		}
		_, err = viewer.Logs(ctx, "nope", c.ExecutionID, 0, 10)
		mustCode(t, err, "not_found")

		if _, err := op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken}); err != nil {
			t.Fatal(err)
		}
		_, err = op.AppendLogs(ctx, c.ID, api.LogsRequest{LeaseToken: c.LeaseToken, Lines: []remote.LogLine{{Line: "late"}}})
		mustCode(t, err, "lease_not_current")
		if p, err := viewer.Logs(ctx, c.ID, c.ExecutionID, 0, 100); err != nil || len(p.Items) != 3 {
			t.Fatalf("after a stale append: %+v %v", p, err)
		}
	})
}
