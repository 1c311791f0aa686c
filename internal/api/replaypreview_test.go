package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// POST /v1/dlq/{id}/replay/preview answers the payload the replay would run
// with (the replay's own patch rules, masked) and writes nothing; it is the
// admin's, like the replay.
func TestReplayPreview(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		id := kill(t, b, apiclient.Task{Queue: "pay", Kind: "charge",
			Payload: json.RawMessage(`{"amount":500,"card":"4242","password":"hunter2","items":[{"qty":1}]}`)})

		st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/"+id+"/replay/preview", "application/json",
			`{"merge_patch":{"amount":5,"card":null},"patch":{"items.0.qty":2}}`)
		if st != http.StatusOK {
			t.Fatalf("preview: %d %s", st, body)
		}
		var p struct {
			ID      string         `json:"id"`
			Payload map[string]any `json:"payload"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		items, _ := p.Payload["items"].([]any)
		if p.ID != id || p.Payload["amount"] != float64(5) || p.Payload["password"] != "[REDACTED]" || len(items) != 1 ||
			items[0].(map[string]any)["qty"] != float64(2) {
			t.Fatalf("preview: %s", body)
		}
		if _, ok := p.Payload["card"]; ok {
			t.Fatalf("the merge patch did not remove card: %s", body)
		}
		// Nothing written: still an open dead letter with its payload, and
		// no replay in its history.
		tk, err := b.lib.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != bt.StateDead || tk.DLQStatus != bt.DLQOpen || !strings.Contains(string(tk.Payload), `"amount":500`) {
			t.Fatalf("the preview changed the task: %s %s %s", tk.State, tk.DLQStatus, tk.Payload)
		}
		evs, err := b.lib.Events(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if strings.HasPrefix(e.Type, "dlq.replay") {
				t.Fatalf("the preview wrote %s", e.Type)
			}
		}

		// An empty body previews the payload as is.
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/"+id+"/replay/preview", "", ""); st != http.StatusOK ||
			!strings.Contains(string(body), `"amount":500`) {
			t.Fatalf("empty preview: %d %s", st, body)
		}
		for _, c := range []struct {
			role   api.Role
			path   string
			body   string
			status int
		}{
			{api.RoleOperator, "/v1/dlq/" + id + "/replay/preview", `{}`, http.StatusForbidden},
			{api.RoleAdmin, "/v1/dlq/" + id + "/replay/preview", `{"patch":{"amount.x":1}}`, http.StatusUnprocessableEntity},
			{api.RoleAdmin, "/v1/dlq/" + id + "/replay/preview", `{"merge_patch":`, http.StatusBadRequest},
			{api.RoleAdmin, "/v1/dlq/01890000-0000-7000-8000-000000000000/replay/preview", `{}`, http.StatusNotFound},
		} {
			if st, body := b.raw(t, c.role, "POST", c.path, "application/json", c.body); st != c.status {
				t.Errorf("%s %s: %d %s, want %d", c.role, c.body, st, body, c.status)
			}
		}
		// A task that is not dead has no replay to preview.
		res, err := b.as[api.RoleOperator].Enqueue(t.Context(), apiclient.Task{Queue: "pay", Kind: "charge", Payload: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/"+res.Task.ID+"/replay/preview", "application/json", `{}`); st != http.StatusNotFound {
			t.Fatalf("preview of a pending task: %d %s", st, body)
		}
	})
}
