package console_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/api"
)

// The tasks page finds a task by idempotency key, filters by error text
// and creation time, and leads to a run by its id; the run page shows its
// progress (total, done, dead) and its tasks, live; an attempt's log
// downloads as text. Markup in the run's data is text.
func TestBrowserRunsAndFinders(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		const img = `<img src=x onerror="window.__pwned = 2">`
		runID := "run-" + img
		keyed := e.enqueue(t, map[string]any{"queue": "r-wait", "kind": "k", "payload": map[string]any{},
			"idempotency_key": "key-" + img, "attributes": map[string]string{"run_id": runID}})
		e.enqueue(t, map[string]any{"queue": "r-other", "kind": "k", "payload": map[string]any{}})
		dead := e.deadLetter(t, map[string]any{"queue": "r-dead", "kind": "k", "payload": map[string]any{},
			"attributes": map[string]string{"run_id": runID}}, "exploded "+img, "log line "+img)
		done := e.succeed(t, "r-ok", map[string]string{"run_id": runID})
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)

		// Find by idempotency key: the list holds that task only.
		run(t, ctx, "open Tasks", click(`#nav a[data-page="tasks"]`), visible("#task-find-key"))
		run(t, ctx, "find by key", keys("#f-key", "key-"+img), submit("#task-find-key"),
			poll(`location.hash.includes("idempotency_key=") && document.querySelectorAll("#task-list tbody tr").length === 1`))
		if l := listIDs(t, ctx, "#task-list"); !contains(l, keyed) {
			t.Fatalf("by key: %q", l)
		}
		// Error text and creation time.
		run(t, ctx, "filter by error", nav(e.url+"/#/tasks?error_contains=exploded"),
			poll(`document.querySelectorAll("#task-list tbody tr").length === 1`))
		if l := listIDs(t, ctx, "#task-list") + text(t, ctx, "#task-list"); !contains(l, dead) || !contains(l, "exploded "+img) {
			t.Fatalf("by error: %q", l)
		}
		past := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		run(t, ctx, "created until an hour ago", nav(e.url+"/#/tasks?created_until="+past),
			poll(`document.querySelector("#task-list") && document.querySelector("#task-list").textContent.includes("No task matches")`))
		run(t, ctx, "created since an hour ago", nav(e.url+"/#/tasks?created_since="+past),
			poll(`document.querySelectorAll("#task-list tbody tr").length === 4`))
		if v := evalJS[string](t, ctx, "since box", `document.querySelector("#f-since").value`); v == "" {
			t.Fatal("the created-from box does not show the filter")
		}
		assertNothingRan(t, ctx, "tasks finders")

		// Run by id: progress and tasks.
		run(t, ctx, "find the run", keys("#f-run", runID), submit("#task-find-run"), visible("#run-progress"))
		prog := evalJS[string](t, ctx, "progress", `(() => { const p = document.querySelector("#run-progress").dataset; return p.total + "/" + p.done + "/" + p.dead; })()`)
		if prog != "3/1/1" {
			t.Fatalf("run progress total/done/dead: %s, want 3/1/1", prog)
		}
		l := listIDs(t, ctx, "#run-tasks")
		for _, id := range []string{keyed, dead, done} {
			if !contains(l, id) {
				t.Fatalf("run tasks lack %s: %q", id, l)
			}
		}
		if h1 := text(t, ctx, "main h1"); !contains(h1, runID) {
			t.Fatalf("run title: %q", h1)
		}
		assertNothingRan(t, ctx, "run page")
		screenshot(t, ctx, "run")
		// Live: a task joining the run shows without a reload.
		e.enqueue(t, map[string]any{"queue": "r-wait", "kind": "k", "payload": map[string]any{}, "attributes": map[string]string{"run_id": runID}})
		run(t, ctx, "the run grows", poll(`document.querySelector("#run-progress") && document.querySelector("#run-progress").dataset.total === "4"`))

		// An attempt's log downloads as text.
		exec := e.task(t, dead).ExecutionID
		run(t, ctx, "the dead task's log", nav(e.url+"/#/tasks/"+url.PathEscape(dead)+"?log="+exec), visible("#log-download"))
		got := evalJS[string](t, ctx, "download body", `fetch(document.querySelector("#log-download").href).then((r) => r.text())`)
		ct := evalJS[string](t, ctx, "download type", `fetch(document.querySelector("#log-download").href).then((r) => r.headers.get("Content-Type"))`)
		if !contains(got, "log line "+img) || !contains(ct, "text/plain") {
			t.Fatalf("log download: %q (%s)", got, ct)
		}
		if d := evalJS[string](t, ctx, "download name", `document.querySelector("#log-download").getAttribute("download")`); !contains(d, "attempt-1") {
			t.Fatalf("download name: %q", d)
		}
	})
}
