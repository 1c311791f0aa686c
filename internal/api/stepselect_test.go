package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// Workflow selection over the API (issue 17 item 7): workflow, run_id and
// step select workflow steps' dead tasks in GET /v1/dlq and POST
// /v1/dlq/redrive; a redrive checks them against the registry (400 naming
// the field, nothing replayed). hold_key (item 4) is accepted true on a
// replay and a redrive and refused false.
func TestDLQWorkflowSelectionAndHoldKey(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		op, admin := b.as[api.RoleOperator], b.as[api.RoleAdmin]
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml", apiWorkflowYAML); st != http.StatusCreated {
			t.Fatalf("apply: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleOperator, "POST", "/v1/workflows/order/runs", "application/json", `{"run_id":"order-1"}`); st != http.StatusCreated {
			t.Fatalf("start: %d %s", st, body)
		}
		// reserve fails for good: the run halts at it.
		c := claimOne(t, op, "wf")
		if c.ID != "order-1.reserve" {
			t.Fatalf("claimed %s", c.ID)
		}
		if r, err := op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: bt.OutcomePermanentError, Error: "down"}); err != nil || r.State != bt.StateDead {
			t.Fatalf("fail: %+v %v", r, err)
		}
		plain := kill(t, b, apiclient.Task{Queue: "wf", Kind: "reserve_slot", Payload: json.RawMessage(`{}`)})

		l, err := admin.DLQList(ctx, url.Values{"workflow": {"order"}, "step": {"reserve"}, "run_id": {"order-1"}})
		if err != nil || len(l.Items) != 1 || l.Items[0].ID != "order-1.reserve" {
			t.Fatalf("GET /v1/dlq?workflow=order&step=reserve&run_id=order-1: %+v %v", l, err)
		}
		for q, field := range map[string]string{
			"workflow=order&attr=workflow%3Dother": "contradicts",
			"step=a.b":                             `step id \"a.b\" must be`,
			"workflow=order&workflow=order":        "workflow",
		} {
			if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/dlq?"+q, "", ""); st != http.StatusBadRequest || !strings.Contains(string(body), field) {
				t.Errorf("GET /v1/dlq?%s: %d %s, want 400 naming %s", q, st, body, field)
			}
		}

		for _, bad := range []struct{ body, field string }{
			{`{"workflow":"nope"}`, `workflow \"nope\" is not registered`},
			{`{"workflow":"order","step":"nope"}`, `no step \"nope\"`},
			{`{"workflow":"order","run_id":"nope"}`, `run_id: run \"nope\" is not a run of workflow`},
			{`{"run_id":"order-1","step":"nope"}`, `has no step \"nope\"`},
			{`{"workflow":"bad name"}`, `\"bad name\" must be`},
			{`{"workflow":"order","hold_key":false}`, "hold_key: false is refused"},
		} {
			st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/redrive", "application/json", bad.body)
			if st != http.StatusBadRequest || !strings.Contains(string(body), bad.field) {
				t.Errorf("redrive %s: %d %s, want 400 naming %s", bad.body, st, body, bad.field)
			}
		}
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/order-1.reserve/replay", "application/json", `{"hold_key":false}`); st != http.StatusBadRequest ||
			!strings.Contains(string(body), "hold_key") {
			t.Errorf("replay hold_key false: %d %s, want 400 naming hold_key", st, body)
		}
		if rs, err := b.lib.Redrives(ctx, "", 10); err != nil || len(rs) != 0 {
			t.Fatalf("bad input started redrives: %+v %v", rs, err)
		}
		if tk, err := b.lib.Get(ctx, "order-1.reserve"); err != nil || tk.State != bt.StateDead || tk.ReplayCount != 0 {
			t.Fatalf("bad input replayed the step: %+v %v", tk, err)
		}

		st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/redrive", "application/json",
			`{"workflow":"order","step":"reserve","dry_run":true}`)
		if st != http.StatusOK || !strings.Contains(string(body), `"matched":1`) {
			t.Fatalf("dry run: %d %s", st, body)
		}
		st, body = b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/redrive", "application/json",
			`{"workflow":"order","step":"reserve","hold_key":true,"wait":"20s"}`)
		if st != http.StatusOK || !strings.Contains(string(body), `"replayed":1`) || !strings.Contains(string(body), `"status":"done"`) {
			t.Fatalf("redrive: %d %s", st, body)
		}
		if tk, err := b.lib.Get(ctx, "order-1.reserve"); err != nil || tk.State != bt.StatePending || tk.ReplayCount != 1 {
			t.Errorf("the step after the redrive: %+v %v, want pending, replayed once", tk, err)
		}
		if tk, err := b.lib.Get(ctx, plain); err != nil || tk.State != bt.StateDead {
			t.Errorf("a dead letter outside the selection: %+v %v, want still dead", tk, err)
		}
		// hold_key true on a replay is accepted.
		plain2 := kill(t, b, apiclient.Task{Queue: "wf2", Kind: "k", Payload: json.RawMessage(`{}`)})
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/"+plain2+"/replay", "application/json", `{"hold_key":true}`); st != http.StatusOK ||
			!strings.Contains(string(body), `"replayed":true`) {
			t.Errorf("replay hold_key true: %d %s", st, body)
		}
	})
}
