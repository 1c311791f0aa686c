package console_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// The DLQ list counts the filter's dead letters by reason and by error
// (each group narrows the list), exports them as NDJSON, and replays "all N
// matching this filter" as a redrive with a live progress bar, canceled
// and resumed; the store then holds each replayed once. A viewer sees no
// bulk action. Markup in an error is text.
func TestBrowserDLQBulk(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		const img = `<img src=x onerror="window.__pwned = 2">`
		var ids []string
		for i := range 8 {
			errText := "bank timeout"
			if i%4 == 0 {
				errText = "declined " + img
			}
			ids = append(ids, e.deadLetter(t, map[string]any{"queue": "bulk", "kind": "charge", "payload": map[string]any{"n": i}}, errText))
		}
		other := e.deadLetter(t, map[string]any{"queue": "other", "kind": "charge", "payload": map[string]any{}}, "bank timeout")
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)

		run(t, ctx, "open the bulk queue's DLQ", nav(e.url+"/#/dlq?queue=bulk&status=open"), visible("#dlq-groups"))
		if n := evalJS[string](t, ctx, "total", `document.querySelector("#dlq-groups").dataset.total`); n != "8" {
			t.Fatalf("total: %s, want 8", n)
		}
		reasons, errs := text(t, ctx, "#groups-reason"), text(t, ctx, "#groups-error")
		if !contains(reasons, "permanent_error8") || !contains(errs, "bank timeout6") || !contains(errs, "declined "+img+"2") {
			t.Fatalf("groups: reasons %q errors %q", reasons, errs)
		}
		assertNothingRan(t, ctx, "dlq groups")
		// An error group narrows the list to it.
		evalJS[bool](t, ctx, "click the declined group", `[...document.querySelectorAll("#groups-error a")].find((a) => a.textContent.startsWith("declined")).click() || true`)
		run(t, ctx, "narrow to the declined group",
			poll(`location.hash.includes("error_contains=declined") && document.querySelectorAll("#dlq-list tbody tr").length === 2`))
		// The time range: dead until an hour ago holds none of them.
		run(t, ctx, "dead until an hour ago", nav(e.url+"/#/dlq?queue=bulk&status=open&until=1h"),
			poll(`document.querySelector("#dlq-groups") && document.querySelector("#dlq-groups").dataset.total === "0" &&
				document.querySelector("#f-until").value === "1h"`))
		run(t, ctx, "back to the queue", nav(e.url+"/#/dlq?queue=bulk&status=open"), visible("#bulk-replay"))
		// Export: the link downloads the filter's dead letters as NDJSON.
		lines := evalJS[string](t, ctx, "export", `fetch(document.querySelector("#dlq-export").href).then((r) => r.text())`)
		if n := strings.Count(strings.TrimSpace(lines), "\n") + 1; n != 8 || strings.Contains(lines, other) {
			t.Fatalf("export: %d lines, want 8 (and not %s): %.300s", n, other, lines)
		}
		if !contains(text(t, ctx, "#dlq-export"), "8") {
			t.Fatalf("export link: %q", text(t, ctx, "#dlq-export"))
		}
		screenshot(t, ctx, "dlq-groups")

		// Replay all 8, paced at 2 a second; cancel once it moved, then resume.
		run(t, ctx, "start the bulk replay", chromedp.SetValue(chromedp.CSS("#bulk-rate"), "2"), click("#bulk-replay"),
			poll(`document.querySelector("#bulk").dataset.status === "running" && Number(document.querySelector("#bulk-progress").value) > 0`))
		run(t, ctx, "cancel", click("#bulk-cancel"), poll(`document.querySelector("#bulk").dataset.status === "canceled"`))
		replayed := evalJS[int](t, ctx, "replayed at the cancel", `Number(document.querySelector("#bulk-progress").value)`)
		if replayed < 1 || replayed >= 8 {
			t.Fatalf("replayed at the cancel: %d", replayed)
		}
		screenshot(t, ctx, "dlq-bulk")
		run(t, ctx, "resume", click("#bulk-resume"),
			poll(`document.querySelector("#bulk").dataset.status === "done" && document.querySelector("#bulk-progress").value === 8`))
		if s := text(t, ctx, "#bulk-text"); !contains(s, "8 of 8 replayed") {
			t.Fatalf("progress text: %q", s)
		}
		for _, id := range ids {
			tk := e.task(t, id)
			if tk.State != bt.StatePending || tk.ReplayCount != 1 {
				t.Fatalf("%s after the bulk replay: %s, replays %d (want pending, replayed once)", id, tk.State, tk.ReplayCount)
			}
		}
		if tk := e.task(t, other); tk.State != bt.StateDead {
			t.Fatalf("a dead letter outside the filter was replayed: %s", tk.State)
		}

		// Replay with a new id: the dead letter stays, marked replayed; a
		// new task runs, replayed from it.
		run(t, ctx, "open the other dead letter", nav(e.url+"/#/dlq/"+other), visible("#replay-form"))
		run(t, ctx, "replay as a new task", click("#replay-new-id"), click("#replay-preview"), visible("#replay-confirm"),
			click("#replay-confirm"), poll(`location.hash.startsWith("#/tasks/") && !location.hash.includes(`+fmt.Sprintf("%q", other)+`)`))
		newID := strings.TrimPrefix(evalJS[string](t, ctx, "the new task", `decodeURIComponent(location.hash)`), "#/tasks/")
		if tk := e.task(t, other); tk.State != bt.StateDead || tk.DLQStatus != bt.DLQReplayed {
			t.Fatalf("the original after a replay as new: %s %s", tk.State, tk.DLQStatus)
		}
		if tk := e.task(t, newID); tk.ReplayedFrom != other || tk.State == bt.StateDead {
			t.Fatalf("the new task %s: replayed from %q, %s", newID, tk.ReplayedFrom, tk.State)
		}

		// A viewer sees the groups and the export, no bulk action; the
		// server refuses the redrive anyway.
		vctx := browser(t)
		e.signIn(t, vctx, api.RoleViewer)
		run(t, vctx, "viewer's DLQ", nav(e.url+"/#/dlq?queue=bulk&status="), visible("#dlq-groups"))
		if n := count(t, vctx, "#bulk, #bulk-replay"); n != 0 {
			t.Fatalf("a viewer sees %d bulk controls", n)
		}
		if st, _, _ := e.call(t, "POST", "/v1/dlq/redrive", api.RoleViewer, map[string]any{"queue": "bulk"}, nil); st != http.StatusForbidden {
			t.Fatalf("viewer's redrive: %d", st)
		}
	})
}
