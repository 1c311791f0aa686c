package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testwait"
)

// POST /v1/runs/{id}/steps/{step}/complete: an admin forces a step (here
// one whose task waits: it is canceled) and the run goes on; other roles,
// bad input, unknowns and a step that cannot be forced are refused with
// distinct statuses, and the run is left as it was.
func TestCompleteStepEndpoint(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml", apiWorkflowYAML); st != http.StatusCreated {
			t.Fatalf("apply: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleOperator, "POST", "/v1/workflows/order/runs", "application/json", `{"run_id":"order-1"}`); st != http.StatusCreated {
			t.Fatalf("start: %d %s", st, body)
		}
		const path = "/v1/runs/order-1/steps/reserve/complete"
		for _, c := range []struct {
			name string
			role api.Role
			path string
			body string
			want int
			says string
		}{
			{"operator", api.RoleOperator, path, `{"reason":"x"}`, http.StatusForbidden, ""},
			{"no reason", api.RoleAdmin, path, `{"result":1}`, http.StatusBadRequest, "reason"},
			{"bad result", api.RoleAdmin, path, `{"result":{,"reason":"x"}`, http.StatusBadRequest, ""},
			{"unknown field", api.RoleAdmin, path, `{"reason":"x","items":1}`, http.StatusBadRequest, "items"},
			{"negative item", api.RoleAdmin, path, `{"reason":"x","item":-1}`, http.StatusBadRequest, "item"},
			{"unknown run", api.RoleAdmin, "/v1/runs/nope/steps/reserve/complete", `{"reason":"x"}`, http.StatusNotFound, "nope"},
			{"unknown step", api.RoleAdmin, "/v1/runs/order-1/steps/nope/complete", `{"reason":"x"}`, http.StatusNotFound, "nope"},
			{"not started", api.RoleAdmin, "/v1/runs/order-1/steps/charge/complete", `{"reason":"x"}`, http.StatusNotFound, "not started"},
		} {
			if st, body := b.raw(t, c.role, "POST", c.path, "application/json", c.body); st != c.want || !strings.Contains(string(body), c.says) {
				t.Errorf("%s: %d %s, want %d naming %q", c.name, st, body, c.want, c.says)
			}
		}
		if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/runs/order-1", "", ""); st != http.StatusOK ||
			!strings.Contains(string(body), `"id":"reserve","kind":"reserve_slot","state":"pending"`) {
			t.Fatalf("a refused force-complete changed the run: %d %s", st, body)
		}
		st, body := b.raw(t, api.RoleAdmin, "POST", path, "application/json", `{"result":{"slot":7},"reason":"reserved by hand"}`)
		if st != http.StatusOK || !strings.Contains(string(body), `"id":"reserve","kind":"reserve_slot","state":"succeeded"`) ||
			!strings.Contains(string(body), `"id":"charge","kind":"charge_card","state":"pending"`) {
			t.Fatalf("complete: %d %s", st, body)
		}
		// The step's waiting task was canceled, saying why.
		if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/tasks/order-1.reserve", "", ""); st != http.StatusOK ||
			!strings.Contains(string(body), `"state":"canceled"`) || !strings.Contains(string(body), "its step was force-completed: reserved by hand") {
			t.Errorf("the forced step's task: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleAdmin, "POST", path, "application/json", `{"reason":"again"}`); st != http.StatusConflict ||
			!strings.Contains(string(body), "succeeded already") {
			t.Errorf("again: %d %s, want 409", st, body)
		}
		// Served once every earlier transaction of the database ended.
		testwait.For(t, "the audit stream to serve step.force_completed", func() bool {
			st, body := b.raw(t, api.RoleViewer, "GET", "/v1/audit?type=step.force_completed", "", "")
			return st == http.StatusOK && strings.Contains(string(body), "reserved by hand")
		})
	})
}
