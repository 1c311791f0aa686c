package console_test

import (
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// An admin picks rows of the dead-letter list: discards two with a reason
// (the third stays open), then picks one and replays it; a viewer gets no
// checkboxes.
func TestBrowserDLQSelectedRows(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		var ids []string
		for range 3 {
			ids = append(ids, e.deadLetter(t, map[string]any{"queue": "pick", "kind": "k", "payload": map[string]any{}}, "boom"))
		}
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)
		run(t, ctx, "open the list", nav(e.url+"/#/dlq?queue=pick&status=open"),
			poll(`document.querySelectorAll("#dlq-list input.pick").length === 3`))
		run(t, ctx, "discard needs a reason", click(`#dlq-list input[data-id="`+ids[0]+`"]`), click(`#dlq-list input[data-id="`+ids[1]+`"]`),
			poll(`document.querySelector("#selection-count").textContent === "2 selected"`),
			click("#selection-discard"), poll(`document.querySelector("#selection-error").textContent.includes("reason")`))
		if tk := e.task(t, ids[0]); tk.DLQStatus != bt.DLQOpen {
			t.Fatalf("discarded without a reason: %s", tk.DLQStatus)
		}
		run(t, ctx, "discard the two", keys("#selection-why", "duplicates"), click("#selection-discard"),
			poll(`document.querySelector("#selection-text").textContent === "2 of 2 discarded"`))
		for i, want := range []bt.DLQStatus{bt.DLQDiscarded, bt.DLQDiscarded, bt.DLQOpen} {
			if tk := e.task(t, ids[i]); tk.DLQStatus != want {
				t.Fatalf("%s is %s, want %s", ids[i], tk.DLQStatus, want)
			}
		}
		run(t, ctx, "replay the third", nav(e.url+"/#/dlq?queue=pick&kind=k&status=open"),
			poll(`document.querySelectorAll("#dlq-list input.pick").length === 1`),
			click("#pick-all"), poll(`document.querySelector("#selection-count").textContent === "1 selected"`),
			click("#selection-replay"), poll(`document.querySelector("#selection-text").textContent === "1 of 1 replayed"`))
		if tk := e.task(t, ids[2]); tk.State != bt.StatePending {
			t.Fatalf("the replayed one is %s, want pending", tk.State)
		}
		// A viewer sees no checkbox.
		vctx := browser(t)
		e.signIn(t, vctx, api.RoleViewer)
		run(t, vctx, "viewer's list", nav(e.url+"/#/dlq?queue=pick&status="), visible("#dlq-list"))
		if n := count(t, vctx, "#dlq-list input.pick"); n != 0 {
			t.Fatalf("a viewer sees %d checkboxes", n)
		}
	})
}
