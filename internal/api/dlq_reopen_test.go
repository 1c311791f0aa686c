package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// TestDLQReplayReopenEndpoint: POST /v1/dlq/{id}/replay {"reopen": true}
// replays a resolved dead letter, for admins only, and the history records
// the admin and the status it came from.
func TestDLQReplayReopenEndpoint(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		op, admin := b.as[api.RoleOperator], b.as[api.RoleAdmin]
		id := kill(t, b, apiclient.Task{Queue: "pay", Kind: "charge"})
		if _, err := admin.Resolve(ctx, id, "by mistake"); err != nil {
			t.Fatal(err)
		}
		r, err := admin.Replay(ctx, id, api.ReplayRequest{})
		if err != nil || r.Replayed || r.DLQStatus != "resolved" {
			t.Fatalf("replay without reopen: %+v %v", r, err)
		}
		_, err = op.Replay(ctx, id, api.ReplayRequest{Reopen: true})
		mustCode(t, err, "forbidden")
		r, err = admin.Replay(ctx, id, api.ReplayRequest{Reopen: true})
		if err != nil || !r.Replayed || r.Task == nil || r.Task.State != "pending" {
			t.Fatalf("replay with reopen: %+v %v", r, err)
		}
		evs, err := b.lib.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		last := evs[len(evs)-1]
		if last.Type != "dlq.replayed" || last.Actor == "" || !strings.Contains(strings.Join(strings.Fields(string(last.Body)), ""), `"from_status":"resolved"`) {
			t.Fatalf("last event: %s by %q: %s", last.Type, last.Actor, last.Body)
		}
	})
}
