package console_test

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/internal/api"
)

// The Audit page lists the operators' actions (the setup's token creations
// too) newest first, filters them
// by actor, type and target (the filters in the address), shows a bad
// filter's 400 beside the form, and follows the audit stream live.
func TestBrowserAudit(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		for _, p := range []string{"/v1/queues/billing/pause", "/v1/queues/mail/pause"} {
			if st, out, _ := e.call(t, "POST", p, api.RoleOperator, nil, map[string]string{"Content-Type": "application/json"}); st != http.StatusOK {
				t.Fatalf("POST %s: %d %v", p, st, out)
			}
		}
		id := e.enqueue(t, map[string]any{"queue": "q", "kind": "k", "payload": map[string]any{}})
		if st, out, _ := e.call(t, "POST", "/v1/tasks/"+id+"/cancel", api.RoleOperator, map[string]any{"reason": "<b>wrong</b> tenant"}, nil); st != http.StatusOK {
			t.Fatalf("cancel: %d %v", st, out)
		}
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "open Audit from the nav", click(`#nav a[data-page="audit"]`), visible("#audit-filters"))
		// These three actions, behind the setup's three token creations.
		run(t, ctx, "six actions", poll(`document.querySelector("#audit-list")?.dataset.count === "6"`))
		rows := evalJS[[]string](t, ctx, "rows", `[...document.querySelectorAll("#audit-rows tr")].map(r => r.dataset.type)`)
		if len(rows) != 6 || rows[0] != "task.canceled" || rows[1] != "queue.paused" || rows[2] != "queue.paused" ||
			rows[3] != "token.created" || rows[4] != "token.created" || rows[5] != "token.created" {
			t.Fatalf("rows, newest first: %v", rows)
		}
		list := text(t, ctx, "#audit-list")
		if !contains(list, "<b>wrong</b> tenant") || !contains(list, "console-operator") || !contains(list, id) ||
			!contains(list, `"name":"console-viewer"`) || !contains(list, `"role":"admin"`) {
			t.Fatalf("audit list: %q", list)
		}
		screenshot(t, ctx, "audit")

		// Filter by type and target: in the address, one row.
		run(t, ctx, "filter", chromedp.SetValue(chromedp.CSS("#au-type"), "queue.paused"), keys("#au-target", "mail"), submit("#audit-filters"))
		run(t, ctx, "the filter is in the address", poll(`location.hash.includes("type=queue.paused") && location.hash.includes("target=mail")`))
		run(t, ctx, "one action", poll(`document.querySelector("#audit-list")?.dataset.count === "1"`))
		waitText(t, ctx, "#audit-rows", "mail")

		// Live: an action taken now appears (filtered by actor).
		run(t, ctx, "filter by actor", nav(e.url+"/#/audit?actor=console-operator&type=queue.resumed"), visible("#audit-filters"))
		run(t, ctx, "none yet", poll(`document.querySelector("#audit-list")?.dataset.count === "0"`))
		if st, out, _ := e.call(t, "POST", "/v1/queues/billing/resume", api.RoleOperator, nil, map[string]string{"Content-Type": "application/json"}); st != http.StatusOK {
			t.Fatalf("resume: %d %v", st, out)
		}
		run(t, ctx, "the resume arrives live", poll(`document.querySelector("#audit-list")?.dataset.count === "1"`))
		waitText(t, ctx, "#audit-rows", "billing")

		// A bad filter: the server's 400 beside the form, the form kept.
		run(t, ctx, "bad since", nav(e.url+"/#/audit?since=yesterday"), visible("#audit-filters"))
		waitText(t, ctx, "#audit-error", "since")
		if v := evalJS[string](t, ctx, "the since box", `document.querySelector("#au-since").value`); v != "yesterday" {
			t.Fatalf("since box: %q", v)
		}
		assertNothingRan(t, ctx, "audit page")
	})
}
