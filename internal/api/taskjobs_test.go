package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// POST /v1/tasks/bulk: bad requests are 400 naming the field with nothing
// changed; an operator (not admin) is refused; a dry run counts and
// samples and changes nothing; the job runs in the server, its record
// (kind, outcomes) read back from /v1/redrives/{id}, with one event per
// task changed; responses match the OpenAPI document.
func TestTaskBulkActions(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		admin := b.as[api.RoleAdmin]
		for i := range 12 {
			if _, err := admin.Enqueue(ctx, apiclient.Task{ID: fmt.Sprintf("bulk-%02d", i), Queue: "bulk", Kind: "k",
				Payload: json.RawMessage(fmt.Sprintf(`{"bad":%t}`, i < 8)), Delay: bt.Duration(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		prio := 3
		for _, bad := range []struct {
			req   api.TaskJobRequest
			field string
		}{
			{api.TaskJobRequest{Action: "task.explode", Queue: "bulk"}, "action"},
			{api.TaskJobRequest{Action: backstop.TaskDelete, Reason: "x"}, "all"},
			{api.TaskJobRequest{Action: backstop.TaskDelete, Queue: "bulk"}, "reason"},
			{api.TaskJobRequest{Action: backstop.TaskRunNow, Queue: "bulk", Priority: &prio}, "priority"},
			{api.TaskJobRequest{Action: backstop.TaskReprioritize, Queue: "bulk"}, "priority"},
			{api.TaskJobRequest{Action: backstop.TaskCancel, States: []bt.State{bt.StateSucceeded}}, "states"},
			{api.TaskJobRequest{Action: backstop.TaskCancel, IDs: []string{"bulk-01"}, Queue: "bulk"}, "ids"},
			{api.TaskJobRequest{Action: backstop.TaskCancel, Where: "payload.bad =="}, "where"},
			{api.TaskJobRequest{Action: backstop.TaskCancel, Queue: "bulk", Sample: 101}, "sample"},
		} {
			_, err := admin.TaskJob(ctx, bad.req)
			var p *api.Problem
			if !errors.As(err, &p) || p.Code != "invalid_input" || p.Field != bad.field {
				t.Fatalf("%+v: %v, want invalid_input naming %s", bad.req, err, bad.field)
			}
		}
		_, err := b.as[api.RoleOperator].TaskJob(ctx, api.TaskJobRequest{Action: backstop.TaskCancel, Queue: "bulk"})
		mustCode(t, err, "forbidden")
		st, err := admin.TaskJob(ctx, api.TaskJobRequest{Action: backstop.TaskDelete, Queue: "bulk", Where: "payload.bad == true", DryRun: true, Sample: 2})
		if err != nil || st.Status != "dry_run" || st.RedriveID != "" || st.Preview == nil || st.Preview.Matched != 8 ||
			len(st.Preview.Sample) != 2 || st.Preview.Sample[0].State != bt.StateScheduled {
			t.Fatalf("dry run: %+v %v", st, err)
		}
		l, err := admin.List(ctx, url.Values{"queue": {"bulk"}})
		if err != nil || len(l.Items) != 12 {
			t.Fatalf("after the bad requests and the dry run: %d tasks, %v", len(l.Items), err)
		}
		st, err = admin.TaskJob(ctx, api.TaskJobRequest{Action: backstop.TaskDelete, Queue: "bulk", Where: "payload.bad == true",
			Reason: "bad deploy", Wait: bt.Duration(20 * time.Second)})
		if err != nil || st.Status != "done" || st.Kind != backstop.TaskDelete || st.Replayed != 8 || st.Outcomes[backstop.OutcomeDeleted] != 8 {
			t.Fatalf("delete: %+v %v", st, err)
		}
		rec, err := admin.RedriveStatus(ctx, st.RedriveID)
		if err != nil || rec.Kind != backstop.TaskDelete || rec.Outcomes[backstop.OutcomeDeleted] != 8 {
			t.Fatalf("the job's record: %+v %v", rec, err)
		}
		evs, err := b.lib.Events(ctx, "bulk-00")
		if err != nil || len(evs) == 0 || evs[len(evs)-1].Type != "task.deleted" || evs[len(evs)-1].Actor == "" {
			t.Fatalf("bulk-00's history: %+v %v", evs, err)
		}
		st, err = admin.TaskJob(ctx, api.TaskJobRequest{Action: backstop.TaskRunNow, IDs: []string{"bulk-08", "bulk-00"}, Wait: bt.Duration(20 * time.Second)})
		if err != nil || st.Status != "done" || st.Replayed != 1 || st.Failed != 1 || st.Outcomes[backstop.OutcomeSkipped] != 1 {
			t.Fatalf("run now by id: %+v %v", st, err)
		}
		if task, err := b.lib.Get(ctx, "bulk-08"); err != nil || task.State != bt.StatePending {
			t.Fatalf("bulk-08: %+v %v", task, err)
		}
	})
}
