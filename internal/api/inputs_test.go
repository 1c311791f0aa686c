package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// TestInvalidInputRefused: what was stored with 201 before issue 13 (a
// payload or string that is not UTF-8, contradictory retry policies, an
// absurd max_attempts, a run_at of year 1) is 400 with nothing written, and
// a cursor no page could have given is 400 invalid_cursor on every listing.
func TestInvalidInputRefused(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		dead := kill(t, b, apiclient.Task{Queue: "dq", Kind: "k", Payload: json.RawMessage(`{"a":1}`),
			Attributes: map[string]string{backstop.RunAttribute: "r1"}})
		problem := func(status int, body []byte) api.Problem {
			t.Helper()
			var p api.Problem
			if err := json.Unmarshal(body, &p); err != nil || p.Status != status {
				t.Fatalf("want a problem document with status %d, got %s (%v)", status, body, err)
			}
			return p
		}

		for _, c := range []struct{ name, path, body, code string }{
			{"payload not UTF-8", "/v1/tasks", "{\"queue\":\"q\",\"kind\":\"k\",\"payload\":{\"a\":\"\xff\xfe\"}}", "invalid_json"},
			{"attribute not UTF-8", "/v1/tasks", "{\"queue\":\"q\",\"kind\":\"k\",\"attributes\":{\"a\":\"\xff\"}}", "invalid_json"},
			{"idempotency key not UTF-8", "/v1/tasks", "{\"queue\":\"q\",\"kind\":\"k\",\"idempotency_key\":\"\xc3\"}", "invalid_json"},
			{"batch payload not UTF-8", "/v1/tasks/batch", "{\"tasks\":[{\"queue\":\"q\",\"kind\":\"k\"},{\"queue\":\"q\",\"kind\":\"k\",\"payload\":\"\xff\"}]}", "invalid_json"},
			{"schedule and base", "/v1/tasks", `{"queue":"q","kind":"k","retry":{"schedule":["1s"],"base":"1s"}}`, "invalid_input"},
			{"base above max", "/v1/tasks", `{"queue":"q","kind":"k","retry":{"base":"1h","max":"1m"}}`, "invalid_input"},
			{"max_attempts 10^12", "/v1/tasks", `{"queue":"q","kind":"k","max_attempts":1000000000000}`, "invalid_input"},
			{"run_at of year 1", "/v1/tasks", `{"queue":"q","kind":"k","run_at":"0001-01-01T00:00:00Z"}`, "invalid_json"},
			{"deadline of year 1", "/v1/tasks", `{"queue":"q","kind":"k","deadline":"0001-01-01T00:00:00Z"}`, "invalid_json"},
			{"batch run_at of year 1", "/v1/tasks/batch", `{"tasks":[{"queue":"q","kind":"k","run_at":"0001-01-01T00:00:00Z"}]}`, "invalid_json"},
			{"replay patch not UTF-8", "/v1/dlq/" + dead + "/replay", "{\"patch\":{\"a\":\"\xff\"}}", "invalid_json"},
			{"replay merge patch not UTF-8", "/v1/dlq/" + dead + "/replay", "{\"merge_patch\":{\"a\":\"\xff\"}}", "invalid_json"},
			{"replay run_at of year 1", "/v1/dlq/" + dead + "/replay", `{"run_at":"0001-01-01T00:00:00Z"}`, "invalid_input"},
			{"redrive run_at of year 1", "/v1/dlq/redrive", `{"queue":"dq","run_at":"0001-01-01T00:00:00Z"}`, "invalid_input"},
			{"redrive patch not UTF-8", "/v1/dlq/redrive", "{\"queue\":\"dq\",\"patch\":{\"a\":\"\xff\"}}", "invalid_json"},
		} {
			st, body := b.raw(t, api.RoleAdmin, "POST", c.path, "application/json", c.body)
			if st != http.StatusBadRequest {
				t.Errorf("%s: %d %s, want 400", c.name, st, body)
				continue
			}
			if p := problem(st, body); p.Code != c.code {
				t.Errorf("%s: code %s (%s), want %s", c.name, p.Code, p.Detail, c.code)
			}
		}
		// Nothing written: the dead letter is the only task, unchanged.
		tasks, err := b.lib.List(ctx, backstop.ListParams{})
		if err != nil || len(tasks) != 1 || tasks[0].ID != dead || tasks[0].State != backstop.StateDead || string(tasks[0].Payload) != `{"a":1}` {
			t.Fatalf("bad input changed the store: %d tasks %v", len(tasks), err)
		}

		got, err := b.lib.Get(ctx, dead)
		if err != nil || len(got.Executions) != 1 {
			t.Fatalf("dead letter: %+v %v", got, err)
		}
		logs := "/v1/tasks/" + dead + "/executions/" + got.Executions[0].ExecutionID + "/logs"
		for _, path := range []string{
			"/v1/tasks?after=%00", "/v1/tasks?after=a%20b", "/v1/tasks?after=%FF",
			"/v1/dlq?after=%00", "/v1/runs/r1/tasks?after=%00", "/v1/workers?after=%00", "/v1/workers?after=%FF",
			"/v1/events?after=garbage", "/v1/events?after=%00", logs + "?after=garbage", logs + "?after=%00",
		} {
			st, body := b.raw(t, api.RoleViewer, "GET", path, "", "")
			if st != http.StatusBadRequest {
				t.Errorf("GET %s: %d %s, want 400", path, st, body)
				continue
			}
			if p := problem(st, body); p.Code != "invalid_cursor" {
				t.Errorf("GET %s: code %s (%s), want invalid_cursor", path, p.Code, p.Detail)
			}
		}
		// A cursor that is an id still pages (the task it names may be gone).
		if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/tasks?after=garbage", "", ""); st != http.StatusOK {
			t.Errorf("GET /v1/tasks?after=garbage: %d %s, want 200 (an id-shaped cursor)", st, body)
		}
	})
}
