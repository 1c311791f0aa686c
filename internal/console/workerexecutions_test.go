package console_test

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/internal/api"
)

// A worker's page pages its executions (newest first, Older / Newest),
// filters them by outcome, and names the execution it runs now.
func TestBrowserWorkerExecutionsPaged(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		// deadLetter claims as worker console-test and fails the attempt.
		for _, msg := range []string{"boom-1", "boom-2", "boom-3"} {
			e.deadLetter(t, map[string]any{"queue": "pages", "kind": "k", "payload": map[string]any{}}, msg)
		}
		ok := e.enqueue(t, map[string]any{"queue": "pages", "kind": "k", "payload": map[string]any{}})
		claim := func() map[string]any {
			st, out, _ := e.call(t, "POST", "/v1/claim", api.RoleOperator, map[string]any{"queues": []string{"pages"}, "worker_id": "console-test", "max": 1}, nil)
			tasks, _ := out["tasks"].([]any)
			if st != http.StatusOK || len(tasks) != 1 {
				t.Fatalf("claim: %d %v", st, out)
			}
			return tasks[0].(map[string]any)
		}
		ct := claim()
		if st, out, _ := e.call(t, "POST", "/v1/tasks/"+ok+"/complete", api.RoleOperator, map[string]any{"lease_token": ct["lease_token"]}, nil); st != http.StatusOK {
			t.Fatalf("complete: %d %v", st, out)
		}
		running := e.enqueue(t, map[string]any{"queue": "pages", "kind": "k", "payload": map[string]any{}})
		claim()
		runningExec := e.task(t, running).ExecutionID

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "the workers list", nav(e.url+"/#/workers"), visible("#worker-list"))
		waitText(t, ctx, "#worker-list", "console-test")
		if n := evalJS[string](t, ctx, "the running cell", `(() => { const th = [...document.querySelectorAll("#worker-list th")].findIndex((x) => x.textContent === "Running"); `+
			`return document.querySelector("#worker-list tbody tr").children[th].textContent })()`); n != "1" {
			t.Fatalf("workers list: running %q, want 1", n)
		}
		run(t, ctx, "the worker, two executions a page", nav(e.url+"/#/workers/console-test?limit=2"), visible("#worker-executions"))
		waitText(t, ctx, "#worker-running", runningExec)
		waitText(t, ctx, "#worker-executions", ok)
		if n := count(t, ctx, "#worker-executions tbody tr"); n != 2 {
			t.Fatalf("first page: %d rows", n)
		}
		if x := text(t, ctx, "#worker-executions"); !contains(x, "boom-3") || contains(x, "boom-2") {
			t.Fatalf("first page: %q", x)
		}
		run(t, ctx, "older", click("#wexec-next"), visible("#wexec-first"))
		waitText(t, ctx, "#worker-executions", "boom-2")
		if x := text(t, ctx, "#worker-executions"); !contains(x, "boom-1") || contains(x, "boom-3") {
			t.Fatalf("second page: %q", x)
		}
		if n := count(t, ctx, "#wexec-next"); n != 0 {
			t.Fatalf("the last page offers an older one")
		}
		run(t, ctx, "newest", click("#wexec-first"), visible("#wexec-next"))
		waitText(t, ctx, "#worker-executions", "boom-3")

		run(t, ctx, "only succeeded", chromedp.SetValue(chromedp.CSS("#wexec-outcome"), "succeeded"), submit("#wexec-filters"),
			poll(`location.hash.includes("outcome=succeeded")`))
		waitText(t, ctx, "#worker-executions", ok)
		if x := text(t, ctx, "#worker-executions"); contains(x, "boom") || count(t, ctx, "#worker-executions tbody tr") != 1 {
			t.Fatalf("succeeded only: %q", x)
		}
	})
}
