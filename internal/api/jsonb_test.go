package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// TestJSONBRefusedOverHTTP: a payload, a batch item, a run's input, a
// replay or redrive patch and a remote worker's result that PostgreSQL's
// jsonb cannot hold (a lone surrogate or \u0000 escape, a number outside
// numeric) are 400 naming the field, the value's path and the reason, on
// both stores; nothing is written, and a where evaluated in SQL still
// answers.
func TestJSONBRefusedOverHTTP(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		dead := kill(t, b, apiclient.Task{Queue: "dq", Kind: "k", Payload: json.RawMessage(`{"amount":5}`)})
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml",
			"name: jb\nqueue: jq\nsteps:\n  - {id: a, kind: a}\n"); st != http.StatusCreated {
			t.Fatalf("apply: %d %s", st, body)
		}
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "rq", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		claimed := claimOne(t, op, "rq")

		type problem struct {
			Field  string `json:"field"`
			Detail string `json:"detail"`
			Index  *int   `json:"index"`
		}
		refused := func(what string, status int, body []byte, field, path string) problem {
			t.Helper()
			var p problem
			if err := json.Unmarshal(body, &p); err != nil || status != http.StatusBadRequest || p.Field != field ||
				!strings.Contains(p.Detail, path) || !strings.Contains(p.Detail, "jsonb") {
				t.Errorf("%s: %d %s, want 400 on %s naming %s and jsonb", what, status, body, field, path)
			}
			return p
		}
		for _, c := range []struct{ name, doc, path string }{
			{"lone surrogate", `{"a":"\udc00"}`, ".a"},
			{"NUL", `{"a":"x\u0000"}`, ".a"},
			{"number", `{"amount":1e200000}`, ".amount"},
		} {
			st, body := b.raw(t, api.RoleOperator, "POST", "/v1/tasks", "application/json", `{"queue":"q","kind":"k","payload":`+c.doc+`}`)
			refused(c.name+": enqueue", st, body, "payload", "payload"+c.path)
			st, body = b.raw(t, api.RoleOperator, "POST", "/v1/tasks/batch", "application/json",
				`{"tasks":[{"queue":"q","kind":"k"},{"queue":"q","kind":"k","payload":`+c.doc+`}]}`)
			if p := refused(c.name+": batch", st, body, "payload", "payload"+c.path); p.Index == nil || *p.Index != 1 {
				t.Errorf("%s: batch: %s, want index 1", c.name, body)
			}
			st, body = b.raw(t, api.RoleOperator, "POST", "/v1/workflows/jb/runs", "application/json", `{"input":`+c.doc+`}`)
			refused(c.name+": run input", st, body, "input", "input"+c.path)
			st, body = b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/"+dead+"/replay", "application/json", `{"merge_patch":`+c.doc+`}`)
			refused(c.name+": replay merge patch", st, body, "merge_patch", "merge_patch"+c.path)
			value := strings.TrimSuffix(c.doc[strings.Index(c.doc, ":")+1:], "}")
			st, body = b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/"+dead+"/replay", "application/json",
				`{"patch":[{"path":"x","value":`+value+`}]}`)
			refused(c.name+": replay patch", st, body, "patch", "payload.x")
			st, body = b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/redrive", "application/json", `{"queue":"dq","merge_patch":`+c.doc+`}`)
			refused(c.name+": redrive", st, body, "merge_patch", "merge_patch"+c.path)
			st, body = b.raw(t, api.RoleOperator, "POST", "/v1/tasks/"+claimed.ID+"/complete", "application/json",
				`{"lease_token":"`+claimed.LeaseToken+`","result":`+c.doc+`}`)
			refused(c.name+": complete", st, body, "result", "result"+c.path)
			res, err := op.CompleteMany(ctx, []api.CompletionItem{{TaskID: claimed.ID, LeaseToken: claimed.LeaseToken, Result: json.RawMessage(c.doc)}})
			if err != nil || res.Results[0].Problem == nil || res.Results[0].Problem.Field != "result" ||
				!strings.Contains(res.Results[0].Problem.Detail, "result"+c.path) {
				t.Errorf("%s: complete batch: %+v %v, want a problem on result", c.name, res, err)
			}
		}

		// Nothing written: the dead letter, the claimed task and no run.
		for _, path := range []string{"/v1/tasks", "/v1/runs", "/v1/dlq/" + dead} {
			st, body := b.raw(t, api.RoleAdmin, "GET", path, "", "")
			if st != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, st, body)
			}
			switch path {
			case "/v1/tasks":
				if n := strings.Count(string(body), `"queue":`); n != 2 {
					t.Errorf("GET /v1/tasks: %d tasks, want the dead letter and the claimed one: %s", n, body)
				}
			case "/v1/runs":
				if strings.Contains(string(body), `"run_id"`) {
					t.Errorf("GET /v1/runs: a run was written: %s", body)
				}
			default:
				if !strings.Contains(string(body), `"amount":5`) || !strings.Contains(string(body), `"dlq_status":"open"`) {
					t.Errorf("the dead letter changed: %s", body)
				}
			}
		}
		if tk, err := op.Get(ctx, claimed.ID); err != nil || tk.Task.State != "running" {
			t.Errorf("the claimed task after refused results: %+v %v, want running", tk, err)
		}
		for _, path := range []string{"/v1/tasks", "/v1/dlq"} {
			st, body := b.raw(t, api.RoleAdmin, "GET", path+"?where="+url.QueryEscape(`payload.amount > 1`), "", "")
			if st != http.StatusOK {
				t.Errorf("GET %s with a where in SQL: %d %s", path, st, body)
			}
		}
	})
}
