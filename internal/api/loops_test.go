package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/api"
)

// The loop options over HTTP: a definition with on_when_error,
// concurrency and budget registers; a run holds back the items past the
// concurrency (shown waiting, with no task) and skips the step whose when
// fails to evaluate, its error shown; bad values are 400 naming the key,
// nothing registered.
func TestWorkflowLoopOptions(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		const def = `name: loops
queue: wf
steps:
  - {id: each, kind: k, for_each: input.xs, concurrency: 1, budget: 10m}
  - {id: maybe, kind: k, when: input.nope == 1, on_when_error: treat_as_false}
`
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml", def); st != http.StatusCreated {
			t.Fatalf("apply: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleOperator, "POST", "/v1/workflows/loops/runs", "application/json",
			`{"input":{"xs":[1,2,3]},"run_id":"loops-1"}`); st != http.StatusCreated {
			t.Fatalf("start: %d %s", st, body)
		}
		st, body := b.raw(t, api.RoleViewer, "GET", "/v1/runs/loops-1", "", "")
		if st != http.StatusOK {
			t.Fatalf("get run: %d %s", st, body)
		}
		var run struct {
			Steps []struct {
				ID    string `json:"id"`
				State string `json:"state"`
				Error string `json:"error"`
				Items []struct {
					Item   int    `json:"item"`
					TaskID string `json:"task_id"`
					State  string `json:"state"`
				} `json:"items"`
			} `json:"steps"`
		}
		if err := json.Unmarshal(body, &run); err != nil || len(run.Steps) != 2 {
			t.Fatalf("run %s: %v", body, err)
		}
		each, maybe := run.Steps[0], run.Steps[1]
		if each.State != "pending" || len(each.Items) != 3 || each.Items[0].State != "pending" || each.Items[0].TaskID != "loops-1.each.0" ||
			each.Items[1].State != "waiting" || each.Items[1].TaskID != "" || each.Items[2].State != "waiting" {
			t.Fatalf("each: %+v", each)
		}
		if maybe.State != "skipped" || !strings.Contains(maybe.Error, "no such key") || !strings.Contains(maybe.Error, "treat_as_false") {
			t.Fatalf("maybe: %+v", maybe)
		}

		for name, c := range map[string]struct{ step, want string }{
			"on_when_error":     {"{id: a, kind: k, when: 'true', on_when_error: ignore}", `on_when_error: \"ignore\" must be`},
			"concurrency":       {"{id: a, kind: k, concurrency: 2}", "concurrency: only a for_each step"},
			"budget":            {"{id: a, kind: k, for_each: input.xs, budget: 10m}", "budget: needs a concurrency"},
			"budget unit":       {"{id: a, kind: k, for_each: input.xs, concurrency: 1, budget: 600}", "budget: write a duration"},
			"concurrency value": {"{id: a, kind: k, for_each: input.xs, concurrency: -2}", "concurrency: -2 is negative"},
		} {
			st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml", "name: bad\nsteps:\n  - "+c.step+"\n")
			if st != http.StatusBadRequest || !strings.Contains(string(body), c.want) {
				t.Errorf("%s: %d %s, want 400 naming %q", name, st, body, c.want)
			}
		}
		if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/workflows/bad", "", ""); st != http.StatusNotFound {
			t.Errorf("a refused definition was registered: %d %s", st, body)
		}
	})
}
