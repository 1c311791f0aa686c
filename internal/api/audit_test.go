package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/audit"
	"github.com/backstophq/backstop/internal/testwait"
)

// GET /v1/audit answers the operators' actions (token creations, queue
// pause and resume, a task cancel with its reason), not the engine's or the producers' events,
// filtered by actor, type, target and time; bad filters are 400s.
func TestAuditAPI(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(t *testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		call := func(role api.Role, method, path, body string) []byte {
			t.Helper()
			ct := ""
			if method == "POST" {
				ct = "application/json"
			}
			code, out := b.raw(t, role, method, path, ct, body)
			if code != http.StatusOK && code != http.StatusCreated {
				t.Fatalf("%s %s: %d %s", method, path, code, out)
			}
			return out
		}
		// list reads behind start (unless the query says where), once set.
		start := ""
		list := func(query string) audit.Page {
			t.Helper()
			if start != "" && !strings.Contains(query, "after=") {
				sep := "?"
				if query != "" {
					sep = "&"
				}
				query += sep + "after=" + url.QueryEscape(start)
			}
			var p audit.Page
			if err := json.Unmarshal(call(api.RoleViewer, "GET", "/v1/audit"+query, ""), &p); err != nil {
				t.Fatal(err)
			}
			return p
		}
		// The setup's three token creations are audited (actor: the
		// library, target: the token, its name and role in the body); the
		// actions below are read behind them.
		tokens := b.setupTokens(t)
		created := list("?type=token.created")
		if len(created.Items) != 3 {
			t.Fatalf("token creations: %+v, want the setup's three", created.Items)
		}
		for i, e := range created.Items {
			var body struct{ Name, Role string }
			if err := json.Unmarshal(e.Body, &body); err != nil {
				t.Fatal(err)
			}
			if e.Cursor != tokens[i].Cursor || e.Target != tokens[i].Subject || e.Actor != "library" ||
				body.Name != "test-"+body.Role || body.Role == "" {
				t.Fatalf("token creation %d: %+v %s, want the setup's %+v", i, e, e.Body, tokens[i])
			}
		}
		start = tokens[len(tokens)-1].Cursor
		before := time.Now().UTC().Add(-time.Minute)
		// A reason past 1 KiB is refused, nothing paused or recorded.
		if code, out := b.raw(t, api.RoleOperator, "POST", "/v1/queues/billing/pause", "application/json",
			`{"reason":"`+strings.Repeat("x", 1025)+`"}`); code != http.StatusBadRequest {
			t.Fatalf("pause with a long reason: %d %s, want 400", code, out)
		}
		call(api.RoleOperator, "POST", "/v1/queues/billing/pause", `{"reason":"card processor maintenance"}`)
		call(api.RoleOperator, "POST", "/v1/queues/billing/resume", "")
		call(api.RoleOperator, "POST", "/v1/tasks", `{"id":"t1","queue":"mail","kind":"k"}`)
		call(api.RoleOperator, "POST", "/v1/tasks/t1/cancel", `{"reason":"wrong tenant"}`)

		var all audit.Page
		testwait.For(t, "three actions", func() bool { all = list(""); return len(all.Items) == 3 })
		got := []string{}
		for _, e := range all.Items {
			got = append(got, e.Type+" "+e.Actor+" "+e.Target+" "+e.Reason)
		}
		want := []string{"queue.paused test-operator billing card processor maintenance", "queue.resumed test-operator billing ",
			"task.canceled test-operator t1 wrong tenant"}
		if strings.Join(got, "|") != strings.Join(want, "|") || !all.Complete {
			t.Fatalf("audit: %q (complete %v), want %q", got, all.Complete, want)
		}
		for q, n := range map[string]int{
			"?type=queue.paused":               1,
			"?type=queue.paused,task.canceled": 2,
			"?actor=test-operator":             3,
			"?actor=someone-else":              0,
			"?target=billing":                  2,
			"?since=" + url.QueryEscape(before.Format(time.RFC3339Nano)):                3,
			"?since=1h&until=" + url.QueryEscape(before.Format(time.RFC3339Nano)):       0,
			"?since=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)): 0,
			"?limit=1": 1,
		} {
			if p := list(q); len(p.Items) != n {
				t.Errorf("GET /v1/audit%s: %d actions, want %d", q, len(p.Items), n)
			}
		}
		// Paging: behind the first action's cursor come the other two.
		if p := list("?after=" + url.QueryEscape(all.Items[0].Cursor)); len(p.Items) != 2 || p.Items[0].Type != "queue.resumed" {
			t.Fatalf("after the first: %+v", p.Items)
		}
		for _, q := range []string{"?type=task.enqueued", "?type=queue.paused,", "?since=yesterday", "?until=-3h",
			"?limit=0", "?limit=1001", "?after=nope", "?since=1h&until=2h", "?bogus=1", "?actor=a&actor=b"} {
			if code, out := b.raw(t, api.RoleViewer, "GET", "/v1/audit"+q, "", ""); code != http.StatusBadRequest {
				t.Errorf("GET /v1/audit%s: %d %s, want 400", q, code, out)
			}
		}
		if code, _ := b.raw(t, api.RoleNone, "GET", "/v1/audit", "", ""); code != http.StatusUnauthorized {
			t.Errorf("GET /v1/audit without a token: %d, want 401", code)
		}
		// A workflow applied and a run canceled: both audited (the run's
		// other events, and the run's start, are not).
		if code, out := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml", apiWorkflowYAML); code != http.StatusCreated {
			t.Fatalf("apply: %d %s", code, out)
		}
		call(api.RoleOperator, "POST", "/v1/workflows/order/runs", `{"input":{"card":"4242"},"run_id":"order-9"}`)
		if code, out := b.raw(t, api.RoleOperator, "POST", "/v1/runs/order-9/cancel", "application/json", `{"reason":"a\u0000b"}`); code != http.StatusBadRequest {
			t.Fatalf("run cancel with a NUL in its reason: %d %s, want 400", code, out)
		}
		call(api.RoleOperator, "POST", "/v1/runs/order-9/cancel", `{"reason":"customer withdrew"}`)
		var flow audit.Page
		testwait.For(t, "the workflow's actions", func() bool {
			flow = list("?type=workflow.applied,run.canceled")
			return len(flow.Items) == 2
		})
		if a, c := flow.Items[0], flow.Items[1]; a.Target != "order" || a.Actor != "test-admin" || c.Target != "order-9" || c.Actor != "test-operator" || c.Reason != "customer withdrew" {
			t.Fatalf("workflow actions: %+v", flow.Items)
		}

	})
}
