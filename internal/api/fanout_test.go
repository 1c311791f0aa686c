package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	backstop "github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// A run whose first fan-out passes limits.max_fanout_bytes is a 400 naming
// the bound, and writes nothing; under the bound the same request starts.
func TestStartRunFanOutBound(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1, lib: &backstop.Config{MaxFanOutBytes: 50_000}})
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml",
			"name: fan\nqueue: wf\nsteps:\n  - {id: each, kind: each, for_each: input.items}\n"); st != http.StatusCreated {
			t.Fatalf("apply: %d %s", st, body)
		}
		run := func(id string, n int) (int, []byte) {
			items := make([]int, n)
			in, _ := json.Marshal(map[string]any{"run_id": id, "input": map[string]any{"items": items, "blob": strings.Repeat("b", 20000)}})
			return b.raw(t, api.RoleOperator, "POST", "/v1/workflows/fan/runs", "application/json", string(in))
		}
		st, body := run("big", 10000)
		if st != http.StatusBadRequest || !strings.Contains(string(body), "limits.max_fanout_bytes") ||
			!strings.Contains(string(body), "fan-out bound of 50000 bytes") || !strings.Contains(string(body), `"input"`) {
			t.Fatalf("10,000 items: %d %s, want 400 naming the bound", st, body)
		}
		if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/runs/big", "", ""); st != http.StatusNotFound {
			t.Fatalf("the refused run: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/tasks/big.each.0", "", ""); st != http.StatusNotFound {
			t.Fatalf("an item of the refused run: %d %s", st, body)
		}
		if st, body := run("small", 100); st != http.StatusCreated {
			t.Fatalf("100 items: %d %s", st, body)
		}
		// The stored item refers to the run's input.
		st, body = b.raw(t, api.RoleViewer, "GET", "/v1/tasks/small.each.7", "", "")
		if st != http.StatusOK || !strings.Contains(string(body), `"input_of_run":"small"`) || strings.Contains(string(body), "bbbbbbbbbb") {
			t.Fatalf("an item: %d %.300s", st, body)
		}
	})
}
