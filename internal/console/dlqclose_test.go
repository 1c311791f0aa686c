package console_test

import (
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// "Discard all N matching" closes the filter's dead letters a batch at a
// time with the reason typed (each with its own history event), leaving
// other queues' alone; without a reason nothing is done. Then "Resolve all
// N matching" on another queue.
func TestBrowserDLQCloseAll(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		var ids, res []string
		for range 5 {
			ids = append(ids, e.deadLetter(t, map[string]any{"queue": "close", "kind": "k", "payload": map[string]any{}}, "gone"))
		}
		for range 2 {
			res = append(res, e.deadLetter(t, map[string]any{"queue": "fixed", "kind": "k", "payload": map[string]any{}}, "fixed by hand"))
		}
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)

		run(t, ctx, "open the queue's DLQ", nav(e.url+"/#/dlq?queue=close&status=open"), visible("#close-discard"))
		run(t, ctx, "discard without a reason", click("#close-discard"),
			poll(`document.querySelector("#close-error").textContent.includes("reason")`))
		if tk := e.task(t, ids[0]); tk.DLQStatus != bt.DLQOpen {
			t.Fatalf("discarded without a reason: %s", tk.DLQStatus)
		}
		// A discard shows how many and a sample first, and waits for its
		// confirm.
		run(t, ctx, "discard all 5: the preview", keys("#close-why", "customer deleted"), click("#close-discard"),
			poll(`document.querySelector("#close-matched") && document.querySelector("#close-matched").dataset.matched === "5" &&
				document.querySelectorAll("#close-preview li.sample").length === 5`))
		if tk := e.task(t, ids[0]); tk.DLQStatus != bt.DLQOpen {
			t.Fatalf("discarded before the confirm: %s", tk.DLQStatus)
		}
		run(t, ctx, "discard all 5: confirm", click("#close-confirm"),
			poll(`document.querySelector("#flash").textContent.startsWith("5 of 5 discarded")`))
		for _, id := range ids {
			tk := e.task(t, id)
			if tk.DLQStatus != bt.DLQDiscarded {
				t.Fatalf("%s is %s, want discarded", id, tk.DLQStatus)
			}
			evs, err := e.lib.Events(t.Context(), id)
			if err != nil || !hasEvent(evs, "dlq.discarded", "console-admin") {
				t.Fatalf("%s: no dlq.discarded by console-admin: %v", id, err)
			}
		}
		for _, id := range res {
			if tk := e.task(t, id); tk.DLQStatus != bt.DLQOpen {
				t.Fatalf("another queue's dead letter %s is %s", id, tk.DLQStatus)
			}
		}
		// No filter: every open dead letter (the other queue's two), which
		// the page asks for with "all": true.
		run(t, ctx, "open every open dead letter", nav(e.url+"/#/dlq?status=open"), visible("#close-resolve"))
		run(t, ctx, "resolve all 2", keys("#close-why", "refunded by hand"), click("#close-resolve"),
			poll(`document.querySelector("#flash").textContent.startsWith("2 of 2 resolved")`))
		for _, id := range res {
			if tk := e.task(t, id); tk.DLQStatus != bt.DLQResolved {
				t.Fatalf("%s is %s, want resolved", id, tk.DLQStatus)
			}
		}
		assertNothingRan(t, ctx, "close all")
	})
}
