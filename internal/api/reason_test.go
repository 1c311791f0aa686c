package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testwait"
)

// lastReason is the operator's reason and the actor of the task's last
// event of type typ.
func lastReason(t *testing.T, b *bundle, id, typ string) (reason, actor string) {
	t.Helper()
	evs, err := b.lib.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type != typ {
			continue
		}
		var body struct {
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(e.Body, &body); err != nil {
			t.Fatal(err)
		}
		reason, actor = body.Reason, e.Actor
	}
	return reason, actor
}

// problemField is the field a 400 problem names.
func problemField(t *testing.T, status int, body []byte) string {
	t.Helper()
	var p struct {
		Field string `json:"field"`
	}
	if status != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %s", status, body)
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return p.Field
}

// TestOperatorReasonEndpoints: replay, redrive (why), resolve, discard,
// purge and cancel take the operator's reason, recorded with the token's
// name in the history (GET /v1/dlq/{id} shows the event bodies). A bad one
// is a 400 naming the field.
func TestOperatorReasonEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		op, admin := b.as[api.RoleOperator], b.as[api.RoleAdmin]
		a := kill(t, b, apiclient.Task{Queue: "q", Kind: "k"})
		r := kill(t, b, apiclient.Task{Queue: "q", Kind: "k"})
		d := kill(t, b, apiclient.Task{Queue: "q", Kind: "k"})
		red := kill(t, b, apiclient.Task{Queue: "bulk", Kind: "k"})
		live, err := op.Enqueue(ctx, apiclient.Task{Queue: "later", Kind: "k", Delay: bt.Duration(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}

		long := strings.Repeat("é", 513) // 1026 bytes
		for _, c := range []struct{ path, body, field string }{
			{"/v1/dlq/" + a + "/replay", `{"reason":"` + long + `"}`, "reason"},
			{"/v1/dlq/" + a + "/resolve", `{"reason":"` + long + `"}`, "reason"},
			{"/v1/dlq/purge", `{"reason":"` + long + `"}`, "reason"},
			{"/v1/dlq/redrive", `{"queue":"bulk","why":"` + long + `"}`, "why"},
			{"/v1/tasks/" + live.Task.ID + "/cancel", `{"reason":"` + long + `"}`, "reason"},
			{"/v1/tasks/" + live.Task.ID + "/cancel", `{"reason":"nul\u0000"}`, "reason"},
		} {
			status, body := b.raw(t, api.RoleAdmin, "POST", c.path, "application/json", c.body)
			if got := problemField(t, status, body); got != c.field {
				t.Fatalf("%s: field %q, want %q: %s", c.path, got, c.field, body)
			}
		}

		if _, err := admin.Replay(ctx, a, api.ReplayRequest{Reason: "upstream fixed"}); err != nil {
			t.Fatal(err)
		}
		for _, typ := range []string{"dlq.replay_requested", "dlq.replayed"} {
			if got, who := lastReason(t, b, a, typ); got != "upstream fixed" || who != "test-admin" {
				t.Fatalf("%s: %q by %q", typ, got, who)
			}
		}
		if _, err := admin.ResolveWith(ctx, r, api.ResolveRequest{Reason: "refunded", Note: "by hand"}); err != nil {
			t.Fatal(err)
		}
		dv, err := admin.Show(ctx, r, false, backstop.ExecutionWindow{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range dv.Events {
			found = found || (e.Type == "dlq.resolved" && strings.Contains(string(e.Body), `"reason":"refunded"`) &&
				strings.Contains(string(e.Body), `"note":"by hand"`))
		}
		if !found {
			t.Fatalf("GET /v1/tasks/%s: no dlq.resolved with the reason and note: %+v", r, dv.Events)
		}
		if _, err := admin.Discard(ctx, d, "obsolete"); err != nil {
			t.Fatal(err)
		}
		st, err := admin.Redrive(ctx, api.RedriveRequest{Queue: "bulk", Why: "outage over", Wait: bt.Duration(20 * time.Second)})
		if err != nil || st.Status != "done" || st.Replayed != 1 || st.Why != "outage over" {
			t.Fatalf("redrive: %+v %v", st, err)
		}
		if got, who := lastReason(t, b, red, "dlq.replayed"); got != "outage over" || who != "test-admin" {
			t.Fatalf("redriven: %q by %q", got, who)
		}
		if _, err := op.CancelWith(ctx, live.Task.ID, api.CancelRequest{Reason: "wrong tenant"}); err != nil {
			t.Fatal(err)
		}
		if got, who := lastReason(t, b, live.Task.ID, "task.canceled"); got != "wrong tenant" || who != "test-operator" {
			t.Fatalf("canceled: %q by %q", got, who)
		}
		pr, err := admin.PurgeDLQ(ctx, api.PurgeRequest{Statuses: []bt.DLQStatus{bt.DLQDiscarded}, Reason: "gdpr"})
		if err != nil || pr.Purged != 1 {
			t.Fatalf("purge: %+v %v", pr, err)
		}
		var page backstop.EventPage
		testwait.For(t, "the dlq.purged event to be served", func() bool {
			page, err = b.lib.ReadEvents(ctx, backstop.ReadEventsParams{Stream: "type.dlq.purged"})
			return err != nil || len(page.Events) > 0
		})
		if err != nil || len(page.Events) != 1 || page.Events[0].Actor != "test-admin" ||
			!strings.Contains(string(page.Events[0].Body), `"reason":"gdpr"`) {
			t.Fatalf("dlq.purged: %+v %v", page, err)
		}
	})
}

// TestRequireReasonEndpoints: with RequireReason (dlq.require_reason) an
// action without a reason is a 400 naming it and changes nothing.
func TestRequireReasonEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1, lib: &backstop.Config{RequireReason: true}})
		ctx := context.Background()
		a := kill(t, b, apiclient.Task{Queue: "q", Kind: "k"})
		live, err := b.as[api.RoleOperator].Enqueue(ctx, apiclient.Task{Queue: "later", Kind: "k", Delay: bt.Duration(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ path, body, field string }{
			{"/v1/dlq/" + a + "/replay", ``, "reason"},
			{"/v1/dlq/" + a + "/replay", `{"reason":"  "}`, "reason"},
			{"/v1/dlq/" + a + "/resolve", `{}`, "reason"},
			{"/v1/dlq/purge", `{"statuses":["discarded"]}`, "reason"},
			{"/v1/dlq/redrive", `{"queue":"q"}`, "why"},
			{"/v1/tasks/" + live.Task.ID + "/cancel", ``, "reason"},
		} {
			status, body := b.raw(t, api.RoleAdmin, "POST", c.path, "application/json", c.body)
			if got := problemField(t, status, body); got != c.field {
				t.Fatalf("%s %s: field %q, want %q: %s", c.path, c.body, got, c.field, body)
			}
		}
		got, err := b.lib.Get(ctx, a)
		if err != nil || got.State != bt.StateDead || got.DLQStatus != bt.DLQOpen {
			t.Fatalf("a after refusals: %+v %v", got, err)
		}
		if got, err := b.lib.Get(ctx, live.Task.ID); err != nil || got.State != bt.StateScheduled {
			t.Fatalf("live after refusals: %+v %v", got, err)
		}
		if _, err := b.as[api.RoleAdmin].Replay(ctx, a, api.ReplayRequest{Reason: "checked"}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPurgeOpenNeedsConfirmation: a purge that names the open status is
// refused (400 naming confirm_open, nothing deleted) unless it confirms;
// a dry run counts them without confirming; the default statuses never
// take an open dead letter.
func TestPurgeOpenNeedsConfirmation(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		admin := b.as[api.RoleAdmin]
		for range 2 {
			kill(t, b, apiclient.Task{Queue: "q", Kind: "k"})
		}
		status, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/purge", "application/json", `{"statuses":["open","discarded"]}`)
		if got := problemField(t, status, body); got != "confirm_open" {
			t.Fatalf("field %q: %s", got, body)
		}
		if pr, err := admin.PurgeDLQ(ctx, api.PurgeRequest{}); err != nil || pr.Purged != 0 {
			t.Fatalf("default purge: %+v %v", pr, err)
		}
		pr, err := admin.PurgeDLQ(ctx, api.PurgeRequest{Statuses: []bt.DLQStatus{bt.DLQOpen}, DryRun: true})
		if err != nil || pr.WouldPurge != 2 {
			t.Fatalf("dry run: %+v %v", pr, err)
		}
		if l, err := admin.DLQList(ctx, nil); err != nil || len(l.Items) != 2 {
			t.Fatalf("open after the refused purge: %+v %v", l, err)
		}
		pr, err = admin.PurgeDLQ(ctx, api.PurgeRequest{Statuses: []bt.DLQStatus{bt.DLQOpen}, ConfirmOpen: true})
		if err != nil || pr.Purged != 2 {
			t.Fatalf("confirmed: %+v %v", pr, err)
		}
	})
}
