package api_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/store"
)

// GET /v1/redrives, GET /v1/redrives/{id} (any redrive, from its record),
// GET /v1/redrives/{id}/items, and a redrive canceled elsewhere resumed by
// POST /v1/redrives/{id}/resume: each dead letter once, outcomes adding up.
func TestRedriveRecordsEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op, admin := b.as[api.RoleViewer], b.as[api.RoleOperator], b.as[api.RoleAdmin]
		for range 12 {
			kill(t, b, apiclient.Task{Queue: "rr", Kind: "k", Payload: json.RawMessage(`{"n":1}`)})
		}
		// A redrive run by the library (another process, as far as the
		// server knows), canceled after its first batch of 5.
		p := backstop.RedriveParams{Filter: backstop.ListParams{Queue: "rr"}, BatchSize: 5,
			MergePatch: json.RawMessage(`{"password":"s3cret"}`)}
		var id string
		_, err := b.lib.Redrive(ctx, p, func(pr backstop.RedriveProgress) {
			if id == "" && pr.Replayed > 0 {
				id = pr.RedriveID
				if _, err := b.lib.CancelRedrive(ctx, id); err != nil {
					t.Error(err)
				}
			}
		})
		if id == "" || err == nil {
			t.Fatalf("canceled redrive: %q %v", id, err)
		}
		st, err := viewer.RedriveStatus(ctx, id)
		if err != nil || st.Status != "canceled" || st.Replayed != 10 || st.Outcomes["replayed"] != 10 ||
			strings.Contains(string(st.Filter), "s3cret") || !strings.Contains(string(st.Filter), "password") {
			t.Fatalf("record status: %+v %v", st, err)
		}
		l, err := viewer.Redrives(ctx, nil)
		if err != nil || len(l.Items) != 1 || l.Items[0].ID != id || l.Items[0].Outcomes["replayed"] != 10 ||
			strings.Contains(string(l.Items[0].Filter), "s3cret") {
			t.Fatalf("list: %+v %v", l, err)
		}
		_, err = viewer.Redrives(ctx, url.Values{"limit": {"0"}})
		mustCode(t, err, "invalid_query")
		_, err = viewer.Redrives(ctx, url.Values{"nope": {"1"}})
		mustCode(t, err, "invalid_query")
		items, err := viewer.RedriveItems(ctx, id, url.Values{"limit": {"4"}})
		if err != nil || len(items.Items) != 4 || items.Next == "" {
			t.Fatalf("items: %+v %v", items, err)
		}
		items, err = viewer.RedriveItems(ctx, id, url.Values{"failed": {"true"}})
		if err != nil || len(items.Items) != 0 {
			t.Fatalf("failed items: %+v %v", items, err)
		}
		_, err = viewer.RedriveItems(ctx, id, url.Values{"outcome": {"bogus"}})
		mustCode(t, err, "invalid_input")
		_, err = viewer.RedriveItems(ctx, "no-such-redrive", nil)
		mustCode(t, err, "not_found")

		_, err = op.ResumeRedrive(ctx, id, api.ResumeRequest{})
		mustCode(t, err, "forbidden")
		// Another process runs it (its heartbeat is fresh): the resume is
		// refused with 409 naming it, and the record says so; force takes
		// it over.
		if _, ok, err := b.store.ClaimRedrive(ctx, store.RedriveClaim{ID: id, Runner: "host/7/other", At: b.clock.Now()}); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		_, err = admin.ResumeRedrive(ctx, id, api.ResumeRequest{})
		mustCode(t, err, "conflict")
		if !strings.Contains(err.Error(), "host/7/other") {
			t.Fatalf("the refusal does not name the runner: %v", err)
		}
		st, err = viewer.RedriveStatus(ctx, id)
		if err != nil || st.Runner != "host/7/other" || !st.RunnerAlive || st.Resumable || st.HeartbeatAt == nil {
			t.Fatalf("status with a live runner: %+v %v", st, err)
		}
		if l, err := viewer.Redrives(ctx, nil); err != nil || l.Items[0].Runner != "host/7/other" || !l.Items[0].RunnerAlive {
			t.Fatalf("list with a live runner: %+v %v", l, err)
		}
		res, err := admin.ResumeRedrive(ctx, id, api.ResumeRequest{Wait: bt.Duration(20 * time.Second), Force: true})
		if err != nil || res.RedriveID != id || !res.Resumed || res.Status != "done" || res.Replayed != 12 || res.Outcomes["replayed"] != 12 {
			t.Fatalf("resume: %+v %v", res, err)
		}
		_, err = admin.ResumeRedrive(ctx, id, api.ResumeRequest{})
		mustCode(t, err, "conflict")
		_, err = admin.ResumeRedrive(ctx, "no-such-redrive", api.ResumeRequest{})
		mustCode(t, err, "not_found")
		tl, err := admin.List(ctx, url.Values{"queue": {"rr"}, "state": {"pending"}})
		if err != nil || len(tl.Items) != 12 {
			t.Fatalf("replayed tasks: %+v %v", tl, err)
		}
		for _, task := range tl.Items {
			if task.ReplayCount != 1 {
				t.Fatalf("%s replayed %d times", task.ID, task.ReplayCount)
			}
		}
		// Cancel of a redrive this server does not run: in its record.
		for range 3 {
			kill(t, b, apiclient.Task{Queue: "rr2", Kind: "k"})
		}
		var id2 string
		_, _ = b.lib.Redrive(ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "rr2"}, Limit: 1}, func(pr backstop.RedriveProgress) { id2 = pr.RedriveID })
		got, err := admin.CancelRedrive(ctx, id2)
		if err != nil || got.Status != "canceled" || got.FinishedAt == nil {
			t.Fatalf("cancel from the record: %+v %v", got, err)
		}
	})
}
