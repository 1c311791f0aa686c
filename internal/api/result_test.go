package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// TestCompleteResult: a remote worker's completion carries the attempt's
// JSON result (single and batch) into the settlement; a result that is not
// JSON or over 1 MiB is 400 naming "result" (an item's problem in the
// batch) and settles nothing; release takes no result. The store is a
// real one under testdb.SettleRecorder: drivers do not write results, so
// the settle seam is where they are observed.
func TestCompleteResult(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		var rec *testdb.SettleRecorder
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1,
			wrap: func(s store.Store) store.Store { rec = testdb.RecordSettlements(s); return rec }})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		for range 4 {
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "res", Kind: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"res"}, WorkerID: "w", Max: 4})
		if err != nil || len(ts) != 4 {
			t.Fatalf("claim: %v %v", ts, err)
		}

		// Refused: not JSON (raw body: the Go client cannot send it), too
		// large, and a result on release. Nothing settles.
		code, body := b.raw(t, api.RoleOperator, "POST", "/v1/tasks/"+ts[0].ID+"/complete", "application/json",
			`{"lease_token":"`+ts[0].LeaseToken+`","result":{"a":}}`)
		if code != http.StatusBadRequest {
			t.Errorf("complete with a result that is not JSON: %d %s, want 400", code, body)
		}
		big := json.RawMessage(`"` + strings.Repeat("x", backstop.MaxResultBytes) + `"`)
		_, err = op.Complete(ctx, ts[0].ID, api.CompleteRequest{LeaseToken: ts[0].LeaseToken, Result: big})
		mustCode(t, err, "invalid_input")
		if p := err.(*api.Problem); p.Status != http.StatusBadRequest || p.Field != "result" {
			t.Errorf("too large a result: %+v, want 400 on field result", p)
		}
		code, body = b.raw(t, api.RoleOperator, "POST", "/v1/tasks/"+ts[0].ID+"/release", "application/json",
			`{"lease_token":"`+ts[0].LeaseToken+`","result":1}`)
		if code != http.StatusBadRequest {
			t.Errorf("release with a result: %d %s, want 400", code, body)
		}
		res, err := op.CompleteMany(ctx, []api.CompletionItem{{TaskID: ts[1].ID, LeaseToken: ts[1].LeaseToken, Result: big}})
		if err != nil || res.Results[0].Problem == nil || res.Results[0].Problem.Field != "result" {
			t.Fatalf("batch item with too large a result: %+v %v, want a problem on result", res, err)
		}
		if n := len(rec.Batches()); n != 0 {
			t.Fatalf("%d settle batches after refused reports, want none", n)
		}

		// Accepted: single, batch, none, null.
		if _, err := op.Complete(ctx, ts[0].ID, api.CompleteRequest{LeaseToken: ts[0].LeaseToken,
			Result: json.RawMessage(`{"total": 42, "items": ["a"]}`)}); err != nil {
			t.Fatal(err)
		}
		res, err = op.CompleteMany(ctx, []api.CompletionItem{
			{TaskID: ts[1].ID, LeaseToken: ts[1].LeaseToken, Result: json.RawMessage(`[1,2]`)},
			{TaskID: ts[2].ID, LeaseToken: ts[2].LeaseToken},
		})
		if err != nil || res.Results[0].Problem != nil || res.Results[1].Problem != nil {
			t.Fatalf("batch: %+v %v", res, err)
		}
		code, body = b.raw(t, api.RoleOperator, "POST", "/v1/tasks/"+ts[3].ID+"/complete", "application/json",
			`{"lease_token":"`+ts[3].LeaseToken+`","result":null}`)
		if code != http.StatusOK {
			t.Fatalf("complete with result null: %d %s", code, body)
		}
		want := map[string]string{ts[0].ID: `{"total":42,"items":["a"]}` /* compacted by the client */, ts[1].ID: `[1,2]`, ts[2].ID: "", ts[3].ID: ""}
		for id, r := range want {
			ss := rec.Of(id)
			if len(ss) != 1 || ss[0].Outcome != backstop.OutcomeSucceeded || string(ss[0].Result) != r {
				t.Errorf("task %s: settlements %+v, want one success with result %q", id, ss, r)
			}
		}
	})
}
