package console_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// assertNothingRan fails when markup from task or worker data ran or
// became elements.
func assertNothingRan(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	if v := evalJS[string](t, ctx, "read the flag", `String(window.__pwned)`); v != "undefined" {
		t.Fatalf("%s: the payload ran (window.__pwned = %s)", where, v)
	}
	if n := count(t, ctx, "main img, main script, #flash img, #flash script"); n != 0 {
		t.Fatalf("%s: %d elements were made from task data", where, n)
	}
}

// The workers page lists a worker registered through the API (host, pid,
// queues, version, labels, state); its page lists its executions, and an
// execution leads to the attempt's log on the task page. Markup in a label
// and an error text is shown as text.
func TestBrowserWorkers(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		const script = `<script>window.__pwned = 1</script>`
		const img = `<img src=x onerror="window.__pwned = 2">`
		if st, out, _ := e.call(t, "POST", "/v1/workers", api.RoleOperator, map[string]any{
			"id": "console-test", "host": "node-a", "pid": 4242, "queues": []string{"billing"}, "version": "v9.9",
			"labels": map[string]string{"team": img + script}}, nil); st != http.StatusOK && st != http.StatusCreated {
			t.Fatalf("register: %d %v", st, out)
		}
		// deadLetter claims as worker console-test, logs and fails.
		id := e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge", "payload": map[string]any{}},
			"boom "+img+script, "charging card 1")
		exec := e.task(t, id).ExecutionID
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)

		run(t, ctx, "open Workers from the nav", click(`#nav a[data-page="workers"]`), visible("#worker-list"))
		waitText(t, ctx, "#worker-list", "console-test")
		list := text(t, ctx, "#worker-list")
		for _, want := range []string{"node-a", "4242", "billing", "v9.9", "active", "remote", "team=" + img + script} {
			if !contains(list, want) {
				t.Fatalf("worker list lacks %q: %q", want, list)
			}
		}
		assertNothingRan(t, ctx, "workers list")
		screenshot(t, ctx, "workers")

		// By keyboard: focus the worker's link, press Enter.
		run(t, ctx, "open the worker by keyboard", chromedp.Focus(chromedp.CSS(`#worker-list a[href="#/workers/console-test"]`)),
			chromedp.KeyEvent(kb.Enter), visible("#worker-executions"))
		waitText(t, ctx, "#worker-executions", id)
		x := text(t, ctx, "#worker-executions")
		if !contains(x, "permanent_error") || !contains(x, img) {
			t.Fatalf("worker executions: %q", x)
		}
		if h := text(t, ctx, "#worker-host"); h != "node-a" {
			t.Fatalf("worker host: %q", h)
		}
		assertNothingRan(t, ctx, "worker page")
		screenshot(t, ctx, "worker")

		run(t, ctx, "open the execution's log", click(`#worker-executions a.exec-log`), visible("#log-lines"))
		waitText(t, ctx, "#log-lines", "charging card 1")
		if href := evalJS[string](t, ctx, "address", `location.hash`); !contains(href, "#/tasks/"+id) || !contains(href, exec) {
			t.Fatalf("log address: %q", href)
		}
		assertNothingRan(t, ctx, "task log")

		// Back from the task page to its worker, and on to the worker's events.
		run(t, ctx, "the task's worker", click(`#executions a[href="#/workers/console-test"]`), visible("#worker-executions"))
		run(t, ctx, "the worker's events", click(`a[href="#/events?stream=worker.console-test&after="]`), visible("#events-list"))
		waitText(t, ctx, "#events-list", "worker.started")
		if l := text(t, ctx, "#events-list"); !contains(l, "node-a") {
			t.Fatalf("worker events: %q", l)
		}
	})
}

// An in-process worker (backstop.Worker) runs a task: the workers page
// lists it, its page shows the success and leads to the attempt's log, and
// when it stops the page says so live.
func TestBrowserWorkersInProcess(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		bg := context.Background()
		w, err := backstop.NewWorker(e.lib, &backstop.WorkerConfig{ID: "inproc-1", Queues: map[string]int{"reports": 1},
			PollInterval: 20 * time.Millisecond, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("render", backstop.HandlerFunc(func(ctx context.Context, tk *backstop.Task) error {
			backstop.WriteLog(ctx, backstop.LogStreamOutput, "rendered page 1")
			return nil
		}))
		if err := w.Start(bg); err != nil {
			t.Fatal(err)
		}
		stopped := false
		t.Cleanup(func() {
			if !stopped {
				_ = w.Stop(bg)
			}
		})
		id := e.enqueue(t, map[string]any{"queue": "reports", "kind": "render", "payload": map[string]any{}})
		testwait.For(t, "task "+id+" to succeed", func() bool { return e.task(t, id).State == bt.StateSucceeded })
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "the workers page", nav(e.url+"/#/workers"), visible("#worker-list"))
		waitText(t, ctx, "#worker-list", "inproc-1")
		if l := text(t, ctx, "#worker-list"); !contains(l, "library (Go, database)") || !contains(l, "active") || !contains(l, "reports") {
			t.Fatalf("worker list: %q", l)
		}
		run(t, ctx, "the worker", click(`#worker-list a[href="#/workers/inproc-1"]`), visible("#worker-executions"))
		waitText(t, ctx, "#worker-executions", id)
		if x := text(t, ctx, "#worker-executions"); !contains(x, "succeeded") {
			t.Fatalf("worker executions: %q", x)
		}
		evalJS[bool](t, ctx, "mark the page", `window.__mark = true`)
		if err := w.Stop(bg); err != nil {
			t.Fatal(err)
		}
		stopped = true
		waitText(t, ctx, "#worker-state", "stopped")
		if !evalJS[bool](t, ctx, "the mark", `window.__mark === true`) {
			t.Fatal("the page was reloaded")
		}
		run(t, ctx, "the execution's log", click(`#worker-executions a.exec-log`), visible("#log-lines"))
		waitText(t, ctx, "#log-lines", "rendered page 1")
	})
}

// The workers page filters by label (GET /v1/workers?label=k=v); a bad
// label filter is the API's 400, shown as text.
func TestBrowserWorkersByLabel(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		const img = `<img src=x onerror="window.__pwned = 2">`
		for _, w := range []struct{ id, team string }{{"w-pay", "payments " + img}, {"w-mail", "mail"}, {"w-none", ""}} {
			labels := map[string]string{"zone": "eu"}
			if w.team != "" {
				labels["team"] = w.team
			}
			if st, out, _ := e.call(t, "POST", "/v1/workers", api.RoleOperator, map[string]any{
				"id": w.id, "host": "node-" + w.id, "pid": 1, "queues": []string{"q"}, "version": "v1", "labels": labels}, nil); st != http.StatusOK && st != http.StatusCreated {
				t.Fatalf("register %s: %d %v", w.id, st, out)
			}
		}
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "open Workers", click(`#nav a[data-page="workers"]`), visible("#worker-list"))
		waitText(t, ctx, "#worker-list", "w-none")
		run(t, ctx, "filter by label", keys("#wf-label", "team=payments "+img), submit("#worker-filters"),
			poll(`location.hash.includes("label=") && document.querySelectorAll("#worker-list tbody tr").length === 1`))
		if l := text(t, ctx, "#worker-list"); !contains(l, "w-pay") || contains(l, "w-mail") {
			t.Fatalf("by label: %q", l)
		}
		assertNothingRan(t, ctx, "workers by label")
		run(t, ctx, "every worker of zone eu", nav(e.url+"/#/workers?label=zone%3Deu"),
			poll(`document.querySelectorAll("#worker-list tbody tr").length === 3`))
		if st, out, _ := e.call(t, "GET", "/v1/workers?label=nokey", api.RoleViewer, nil, nil); st != http.StatusBadRequest {
			t.Fatalf("label without =: %d %v", st, out)
		}
		if st, out, _ := e.call(t, "GET", "/v1/workers?label=bad%20key%3Dx", api.RoleViewer, nil, nil); st != http.StatusBadRequest {
			t.Fatalf("a bad label key: %d %v", st, out)
		}
	})
}
