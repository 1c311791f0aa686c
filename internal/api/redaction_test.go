package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// Secrets planted in payloads (and in a replay's patch) must never appear
// in what viewers, operators or admins read without ?raw=true; an admin's
// raw read shows them and is audited; other roles are refused raw.
const plantedPayload = `{"to":"a@example.com","password":"SECRET-1","nested":{"Api-Key":"SECRET-2","items":[{"oauth_token":"SECRET-3"}]}}`

var secrets = []string{"SECRET-1", "SECRET-2", "SECRET-3", "SECRET-4"}

func TestRedaction(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		admin := b.as[api.RoleAdmin]
		res, err := b.as[api.RoleOperator].Enqueue(ctx, apiclient.Task{Queue: "sec", Kind: "k", Payload: json.RawMessage(plantedPayload),
			Attributes: map[string]string{"run_id": "r-sec"}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(res.Task.Payload), "SECRET") {
			t.Errorf("the enqueue response shows a secret: %s", res.Task.Payload)
		}
		// The worker protocol hands the payload over as stored.
		c := claimOne(t, b.as[api.RoleOperator], "sec")
		if string(c.Payload) != plantedPayload {
			t.Fatalf("claimed payload %s, want it raw", c.Payload)
		}
		if _, err := b.as[api.RoleOperator].Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: backstop.OutcomePermanentError, Error: "x"}); err != nil {
			t.Fatal(err)
		}
		// A failed replay records its patch (with a secret) in the history.
		_, err = admin.Replay(ctx, c.ID, api.ReplayRequest{PatchRequest: api.PatchRequest{
			Patch: json.RawMessage(`{"to.password":"SECRET-4"}`)}})
		mustCode(t, err, "unprocessable")
		id := c.ID
		// The lists show payloads when asked (include=payload; summaries
		// otherwise: TestBoundedLists).
		reads := []string{"/v1/tasks/" + id, "/v1/tasks?queue=sec&include=payload", "/v1/dlq?include=payload", "/v1/dlq/" + id,
			"/v1/dlq/export", "/v1/runs/r-sec/tasks?include=payload"}
		for _, role := range []api.Role{api.RoleViewer, api.RoleOperator, api.RoleAdmin} {
			for _, path := range reads {
				st, body := b.raw(t, role, "GET", path, "", "")
				if st != 200 {
					t.Fatalf("%s as %s: %d %s", path, role, st, body)
				}
				for _, s := range secrets {
					if strings.Contains(string(body), s) {
						t.Errorf("%s as %s shows %s: %s", path, role, s, body)
					}
				}
				if !strings.Contains(string(body), "a@example.com") {
					t.Errorf("%s as %s: the rest of the payload should stay readable: %s", path, role, body)
				}
			}
		}
		// Raw: admin only, audited per task shown.
		for _, role := range []api.Role{api.RoleViewer, api.RoleOperator} {
			if st, _ := b.raw(t, role, "GET", "/v1/tasks/"+id+"?raw=true", "", ""); st != 403 {
				t.Errorf("raw as %s: %d, want 403", role, st)
			}
		}
		if st, _ := b.raw(t, api.RoleAdmin, "GET", "/v1/tasks/"+id+"?raw=maybe", "", ""); st != 400 {
			t.Errorf("raw=maybe: %d, want 400", st)
		}
		events := func() int {
			evs, err := b.lib.Events(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range evs {
				if e.Type == backstop.EventPayloadViewed {
					if e.Actor != "test-admin" || !strings.Contains(string(e.Body), "GET /v1/") {
						t.Errorf("audit event: %+v", e)
					}
					n++
				}
			}
			return n
		}
		if n := events(); n != 0 {
			t.Fatalf("%d audit events before any raw view", n)
		}
		// A raw list of summaries shows no payload: nothing to audit.
		if st, body := b.raw(t, api.RoleAdmin, "GET", "/v1/tasks?queue=sec&raw=true", "", ""); st != 200 || strings.Contains(string(body), "SECRET") {
			t.Fatalf("raw summaries: %d %s", st, body)
		}
		if n := events(); n != 0 {
			t.Fatalf("%d audit events after a raw list of summaries", n)
		}
		for i, path := range []string{"/v1/tasks/" + id + "?raw=true", "/v1/tasks?queue=sec&raw=1&include=payload", "/v1/dlq/export?raw=true"} {
			st, body := b.raw(t, api.RoleAdmin, "GET", path, "", "")
			if st != 200 || !strings.Contains(string(body), "SECRET-1") {
				t.Fatalf("%s: %d %s", path, st, body)
			}
			if n := events(); n != i+1 {
				t.Errorf("after %s: %d audit events, want %d", path, n, i+1)
			}
		}
		if st, body := b.raw(t, api.RoleAdmin, "GET", "/v1/tasks/"+id+"?raw=false", "", ""); st != 200 || strings.Contains(string(body), "SECRET") {
			t.Errorf("raw=false: %d %s", st, body)
		}
	})
}
