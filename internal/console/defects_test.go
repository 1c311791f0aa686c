package console_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// The console's defects, each seen as an operator sees it: a replay's
// message survives the page it leads to; "replay all N" leaves the list's
// counts true once done; a succeeded attempt's badge is green, a failed
// one's red; a program's stdout and stderr lines say which; a CLI exec
// worker is called so, with its version; the overview warns of a queue
// whose pending work waits with no active worker; the Ordering page lists
// a declared ordered queue that holds nothing.
func TestBrowserConsoleDefects(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{queues: map[string]backstop.QueueConfig{
			"ord-declared": {Ordering: backstop.OrderingConfig{Enabled: true}}}})
		ctx0 := context.Background()

		// A remote exec worker (as `backstop work --server` registers)
		// takes queue "served"; its task writes stdout and stderr, then
		// succeeds.
		if st, out, _ := e.call(t, "POST", "/v1/workers", api.RoleOperator, map[string]any{"id": "exec-w", "host": "node-x", "pid": 7,
			"queues": []string{"served"}, "version": "v1.2.3 abcdef012345", "labels": map[string]string{"runner": "exec"}}, nil); st != http.StatusOK && st != http.StatusCreated {
			t.Fatalf("register: %d %v", st, out)
		}
		ok := e.enqueue(t, map[string]any{"queue": "served", "kind": "k", "payload": map[string]any{}})
		st, out, _ := e.call(t, "POST", "/v1/claim", api.RoleOperator, map[string]any{"queues": []string{"served"}, "worker_id": "exec-w", "max": 1}, nil)
		claimed, _ := out["tasks"].([]any)
		if st != http.StatusOK || len(claimed) != 1 {
			t.Fatalf("claim: %d %v", st, out)
		}
		lease := claimed[0].(map[string]any)["lease_token"].(string)
		exec := claimed[0].(map[string]any)["execution_id"].(string)
		if st, out, _ := e.call(t, "POST", "/v1/tasks/"+ok+"/logs", api.RoleOperator, map[string]any{"lease_token": lease,
			"lines": []map[string]string{{"stream": "stdout", "line": "wrote 3 rows"}, {"stream": "stderr", "line": "warning: slow disk"}}}, nil); st != http.StatusOK {
			t.Fatalf("logs: %d %v", st, out)
		}
		if st, out, _ := e.call(t, "POST", "/v1/tasks/"+ok+"/complete", api.RoleOperator, map[string]any{"lease_token": lease}, nil); st != http.StatusOK {
			t.Fatalf("complete: %d %v", st, out)
		}
		failed := e.deadLetter(t, map[string]any{"queue": "rall", "kind": "k", "payload": map[string]any{}}, "boom")
		for range 2 {
			e.deadLetter(t, map[string]any{"queue": "rall", "kind": "k", "payload": map[string]any{}}, "boom")
		}
		// Pending work 20 minutes old in a queue no worker takes, and in
		// the one the exec worker takes.
		e.clock.Advance(-20 * time.Minute)
		for _, q := range []string{"stuck", "served"} {
			if _, err := e.lib.Enqueue(ctx0, backstop.EnqueueParams{Queue: q, Kind: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(20 * time.Minute)

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)

		// The overview: stuck warned, served running.
		run(t, ctx, "the overview", nav(e.url+"/#/"), visible("#stuck-stuck"))
		if s := text(t, ctx, "#stuck-stuck"); !contains(s, "no worker") || !contains(s, "20m") {
			t.Fatalf("stuck queue status: %q", s)
		}
		if n := count(t, ctx, "#stuck-served"); n != 0 {
			t.Fatal("a queue an active worker takes is warned about")
		}
		screenshot(t, ctx, "overview-stuck")

		// Workers: the exec worker says so, with its version.
		run(t, ctx, "the workers", nav(e.url+"/#/workers"), visible("#worker-list"))
		waitText(t, ctx, "#worker-list", "exec-w")
		if l := text(t, ctx, "#worker-list"); !contains(l, "exec (backstop work --server)") || !contains(l, "v1.2.3 abcdef012345") || contains(l, "in-process") {
			t.Fatalf("worker list: %q", l)
		}

		// The task: its attempt's badge green, the log's streams named.
		run(t, ctx, "the succeeded task's log", nav(e.url+"/#/tasks/"+ok+"?log="+exec), visible("#log-lines"))
		green := evalJS[string](t, ctx, "succeeded badge", `getComputedStyle(document.querySelector("#executions .badge.outcome")).color`)
		if green != "rgb(31, 122, 58)" {
			t.Fatalf("a succeeded attempt's badge is %s, want the ok colour rgb(31, 122, 58)", green)
		}
		streams := evalJS[string](t, ctx, "log streams", `[...document.querySelectorAll("#log-lines .line")].map((l) => l.dataset.stream).join(" ")`)
		if streams != "stdout stderr" || !contains(text(t, ctx, "#log-lines"), "stderr warning: slow disk") {
			t.Fatalf("log streams: %q", streams)
		}
		run(t, ctx, "the dead letter's task", nav(e.url+"/#/tasks/"+failed), visible("#executions .badge.outcome"))
		if red := evalJS[string](t, ctx, "failed badge", `getComputedStyle(document.querySelector("#executions .badge.outcome")).color`); red != "rgb(179, 38, 30)" {
			t.Fatalf("a failed attempt's badge is %s, want the danger colour", red)
		}

		// One replay: its message is on the task page it leads to.
		run(t, ctx, "the dead letter", nav(e.url+"/#/dlq/"+failed), visible("#replay-form"))
		run(t, ctx, "preview", submit("#replay-form"), visible("#replay-confirm"))
		run(t, ctx, "confirm", click("#replay-confirm"),
			poll(`location.hash === "#/tasks/`+failed+`" && !!document.querySelector("#task-state")`))
		if f := text(t, ctx, "#flash"); !contains(f, "Replayed "+failed) {
			t.Fatalf("after the replay the flash says %q", f)
		}

		// Replay all 2 left: once done the list says 0 open.
		run(t, ctx, "the queue's dead letters", nav(e.url+"/#/dlq?queue=rall&status=open"), visible("#bulk-replay"))
		if s := text(t, ctx, "#dlq-total"); s != "2 match" {
			t.Fatalf("before: %q", s)
		}
		run(t, ctx, "replay all", click("#bulk-replay"),
			poll(`document.querySelector("#bulk") && document.querySelector("#bulk").dataset.status === "done"`))
		run(t, ctx, "the counts after", poll(`document.querySelector("#dlq-total") && document.querySelector("#dlq-total").textContent === "0 match" &&
			document.querySelector('#dlq-tabs a[data-state="open"] .count').textContent === "0"`))

		// Ordering: the declared queue, empty, is listed.
		run(t, ctx, "the ordering page", nav(e.url+"/#/ordering"), visible("#ordered-queues"))
		if n := count(t, ctx, `#ordered-queues a[data-queue="ord-declared"]`); n != 1 {
			t.Fatalf("the ordered queues: %q", text(t, ctx, "#ordered-queues"))
		}
	})
}
