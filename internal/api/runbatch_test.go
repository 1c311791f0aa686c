package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/api"
)

// POST /v1/runs/batch: an operator starts many runs in one request, 201
// with every run in the request's order; a viewer is refused; a bad run
// (its JSON, its value, a run id twice, a workflow not registered, a run
// id that exists) is refused with its index and a distinct status, and
// nothing of the batch is written; over 1000 runs is 413, none is 400, a
// body over the limit 413.
func TestRunBatchEndpoint(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1, maxBody: 1 << 20})
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml", apiWorkflowYAML); st != http.StatusCreated {
			t.Fatalf("apply: %d %s", st, body)
		}
		st, body := b.raw(t, api.RoleOperator, "POST", "/v1/runs/batch", "application/json",
			`{"runs":[{"workflow":"order","run_id":"b-1","input":{"n":1}},{"workflow":"order","version":1,"trace":true},{"workflow":"order","run_id":"b-3"}]}`)
		if st != http.StatusCreated {
			t.Fatalf("batch: %d %s", st, body)
		}
		var res api.RunBatchResponse
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Results) != 3 || res.Results[0].RunID != "b-1" || res.Results[2].RunID != "b-3" || res.Results[1].RunID == "" ||
			res.Results[1].Workflow != "order" || res.Results[1].Version != 1 || res.Results[1].State != "running" {
			t.Fatalf("results: %+v", res.Results)
		}
		for _, id := range []string{"b-1", res.Results[1].RunID, "b-3"} {
			if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/runs/"+id, "", ""); st != http.StatusOK {
				t.Fatalf("run %s: %d %s", id, st, body)
			}
		}
		run := func(id string) string { return fmt.Sprintf(`{"workflow":"order","run_id":%q}`, id) }
		many := make([]string, 1001)
		for i := range many {
			many[i] = `{"workflow":"order"}`
		}
		for _, c := range []struct {
			name, body string
			role       api.Role
			want       int
			code       string
			index      int // -1: none
		}{
			{"viewer", `{"runs":[` + run("x-0") + `]}`, api.RoleViewer, http.StatusForbidden, "forbidden", -1},
			{"no runs", `{"runs":[]}`, api.RoleOperator, http.StatusBadRequest, "invalid_input", -1},
			{"too many", `{"runs":[` + strings.Join(many, ",") + `]}`, api.RoleOperator, http.StatusRequestEntityTooLarge, "too_large", -1},
			{"body over the limit", `{"runs":[{"workflow":"order","input":"` + strings.Repeat("a", 1<<20) + `"}]}`, api.RoleOperator, http.StatusRequestEntityTooLarge, "too_large", -1},
			{"unknown key", `{"runs":[` + run("x-0") + `,{"workflow":"order","queue":"q"}]}`, api.RoleOperator, http.StatusBadRequest, "invalid_json", 1},
			{"bad input", `{"runs":[` + run("x-0") + `,{"workflow":"order","input":{"a":"\u0000"}}]}`, api.RoleOperator, http.StatusBadRequest, "invalid_input", 1},
			{"run id twice", `{"runs":[` + run("x-0") + `,` + run("x-0") + `]}`, api.RoleOperator, http.StatusBadRequest, "invalid_input", 1},
			{"unknown workflow", `{"runs":[` + run("x-0") + `,{"workflow":"nope"}]}`, api.RoleOperator, http.StatusNotFound, "not_found", 1},
			{"run id exists", `{"runs":[` + run("x-0") + `,` + run("b-3") + `]}`, api.RoleOperator, http.StatusConflict, "conflict", 1},
		} {
			st, body := b.raw(t, c.role, "POST", "/v1/runs/batch", "application/json", c.body)
			var p api.Problem
			_ = json.Unmarshal(body, &p)
			if st != c.want || p.Code != c.code {
				t.Errorf("%s: %d %s; want %d %s", c.name, st, body, c.want, c.code)
				continue
			}
			if c.index >= 0 && (p.Index == nil || *p.Index != c.index) {
				t.Errorf("%s: %s; want index %d", c.name, body, c.index)
			}
			if st, _ := b.raw(t, api.RoleViewer, "GET", "/v1/runs/x-0", "", ""); st != http.StatusNotFound {
				t.Errorf("%s: run x-0 after the refused batch: %d; want 404", c.name, st)
			}
		}
	})
}
