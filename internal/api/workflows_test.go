package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/api"
)

const apiWorkflowYAML = `name: order
queue: wf
steps:
  - id: reserve
    kind: reserve_slot
  - id: charge
    kind: charge_card
    needs: [reserve]
`

// The workflow endpoints: an admin registers a definition (YAML or JSON;
// the same one again is the same version), an operator starts a run, a
// viewer reads runs with the input masked; bad definitions are 400 naming
// the step and write nothing; roles are enforced.
func TestWorkflowEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		st, body := b.raw(t, api.RoleOperator, "POST", "/v1/workflows", "application/yaml", apiWorkflowYAML)
		if st != http.StatusForbidden {
			t.Fatalf("operator applied a definition: %d %s", st, body)
		}
		st, body = b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml", apiWorkflowYAML)
		if st != http.StatusCreated {
			t.Fatalf("apply: %d %s", st, body)
		}
		var v struct {
			Version  int    `json:"version"`
			PlanHash string `json:"plan_hash"`
		}
		if err := json.Unmarshal(body, &v); err != nil || v.Version != 1 || len(v.PlanHash) != 64 {
			t.Fatalf("apply: %s", body)
		}
		if st, body = b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml", apiWorkflowYAML); st != http.StatusOK ||
			!strings.Contains(string(body), `"version":1`) {
			t.Fatalf("applying the same definition again: %d %s", st, body)
		}
		for name, c := range map[string]struct{ body, want string }{
			"cycle":  {"name: x\nsteps:\n  - {id: a, kind: k, needs: [b]}\n  - {id: b, kind: k, needs: [a]}\n", `a`},
			"needs":  {"name: x\nsteps:\n  - {id: a, kind: k, needs: [nope]}\n", `nope`},
			"key":    {"name: x\nstepz: []\n", `stepz`},
			"syntax": {"name: [", ``},
		} {
			st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml", c.body)
			if st != http.StatusBadRequest || !strings.Contains(string(body), c.want) {
				t.Errorf("%s: %d %s, want 400 naming %q", name, st, body, c.want)
			}
		}
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "text/plain", apiWorkflowYAML); st != http.StatusUnsupportedMediaType {
			t.Errorf("text/plain: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/workflows", "", ""); st != http.StatusOK ||
			!strings.Contains(string(body), `"name":"order"`) || strings.Count(string(body), `"plan_hash"`) != 1 {
			t.Errorf("list: %d %s (want only order)", st, body)
		}

		if st, body := b.raw(t, api.RoleViewer, "POST", "/v1/workflows/order/runs", "application/json", `{}`); st != http.StatusForbidden {
			t.Errorf("viewer started a run: %d %s", st, body)
		}
		st, body = b.raw(t, api.RoleOperator, "POST", "/v1/workflows/order/runs", "application/json",
			`{"input":{"card":"4242","password":"hunter2"},"run_id":"order-1"}`)
		if st != http.StatusCreated || !strings.Contains(string(body), `"run_id":"order-1"`) || !strings.Contains(string(body), `"state":"running"`) {
			t.Fatalf("start: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleOperator, "POST", "/v1/workflows/order/runs", "application/json", `{"run_id":"order-1"}`); st != http.StatusConflict {
			t.Errorf("same run id again: %d %s, want 409", st, body)
		}
		if st, body := b.raw(t, api.RoleOperator, "POST", "/v1/workflows/nope/runs", "application/json", `{}`); st != http.StatusNotFound {
			t.Errorf("unknown workflow: %d %s, want 404", st, body)
		}
		if st, body := b.raw(t, api.RoleOperator, "POST", "/v1/workflows/order/runs", "application/json", `{"input":`); st != http.StatusBadRequest {
			t.Errorf("bad body: %d %s, want 400", st, body)
		}
		st, body = b.raw(t, api.RoleViewer, "GET", "/v1/runs/order-1", "", "")
		if st != http.StatusOK || !strings.Contains(string(body), `"workflow":"order"`) || strings.Contains(string(body), "hunter2") ||
			!strings.Contains(string(body), `"id":"charge","kind":"charge_card","state":"waiting"`) {
			t.Fatalf("get run: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/runs?workflow=order&state=running", "", ""); st != http.StatusOK ||
			!strings.Contains(string(body), `"run_id":"order-1"`) || strings.Contains(string(body), "hunter2") {
			t.Errorf("list runs: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/runs?state=bogus", "", ""); st != http.StatusBadRequest {
			t.Errorf("bad state: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleViewer, "POST", "/v1/runs/order-1/cancel", "", ""); st != http.StatusForbidden {
			t.Errorf("viewer canceled: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleOperator, "POST", "/v1/runs/order-1/cancel", "", ""); st != http.StatusOK ||
			!strings.Contains(string(body), `"state":"canceled"`) {
			t.Errorf("cancel: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleOperator, "POST", "/v1/runs/order-1/cancel", "", ""); st != http.StatusConflict {
			t.Errorf("cancel again: %d %s, want 409", st, body)
		}
	})
}
