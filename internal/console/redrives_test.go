package console_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/backstophq/backstop/internal/api"
)

// The Redrives pages: every bulk replay with its outcome counts, and the
// items that did not replay and why (two planted conflicts: live tasks hold
// their idempotency keys), or any one outcome's; a running redrive is
// followed live, canceled and resumed from its page; a viewer reads, with
// no action.
func TestBrowserRedrives(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		var conflicts []string
		for i := range 5 {
			key := fmt.Sprintf("rd-key-%d", i)
			id := e.deadLetter(t, map[string]any{"queue": "rd", "kind": "charge", "payload": map[string]any{"n": i}, "idempotency_key": key}, "bank timeout")
			if i%2 == 1 {
				conflicts = append(conflicts, id)
				e.enqueue(t, map[string]any{"queue": "holders", "kind": "charge", "payload": map[string]any{}, "idempotency_key": key})
			}
		}
		slices.Sort(conflicts)
		st, out, _ := e.call(t, "POST", "/v1/dlq/redrive", api.RoleAdmin, map[string]any{"queue": "rd", "why": "bank is back", "wait": "20s"}, nil)
		if st != http.StatusOK || out["status"] != "done" {
			t.Fatalf("redrive: %d %v", st, out)
		}
		done := out["redrive_id"].(string)

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)
		run(t, ctx, "the redrives list", nav(e.url+"/#/redrives"), visible(`#redrive-list a[href="#/redrives/`+done+`"]`))
		run(t, ctx, "open the redrive", click(`#redrive-list a[href="#/redrives/`+done+`"]`),
			poll(`document.querySelector("#redrive") && document.querySelector("#redrive").dataset.status === "done"`))
		if r, f := text(t, ctx, "#redrive-replayed"), text(t, ctx, "#redrive-failed"); r != "3" || f != "2" {
			t.Fatalf("replayed %s, did not replay %s; want 3 and 2", r, f)
		}
		if w := text(t, ctx, "#redrive-why"); w != "bank is back" {
			t.Fatalf("why: %q", w)
		}
		failed := evalJS[[]string](t, ctx, "the items that did not replay",
			`[...document.querySelectorAll("#redrive-items tbody tr")].map((tr) => tr.cells[0].textContent + " " + tr.cells[1].textContent)`)
		want := []string{conflicts[0] + " conflict", conflicts[1] + " conflict"}
		if !slices.Equal(failed, want) {
			t.Fatalf("items that did not replay: %v, want %v", failed, want)
		}
		if n := count(t, ctx, "#redrive-cancel:not([hidden]), #redrive-resume:not([hidden])"); n != 0 {
			t.Fatalf("a finished redrive offers %d actions", n)
		}
		screenshot(t, ctx, "redrive")
		run(t, ctx, "the replayed items",
			poll(`(() => { const s = document.querySelector("#f-outcome"); s.value = "replayed"; s.dispatchEvent(new Event("change")); return true })()`),
			poll(`location.hash.endsWith("outcome=replayed") && document.querySelectorAll("#redrive-items tbody tr").length === 3`))

		// A slow redrive: followed live, canceled, resumed to the end.
		for i := range 6 {
			e.deadLetter(t, map[string]any{"queue": "slow", "kind": "charge", "payload": map[string]any{"n": i}}, "bank timeout")
		}
		st, out, _ = e.call(t, "POST", "/v1/dlq/redrive", api.RoleAdmin, map[string]any{"queue": "slow", "rate": 2}, nil)
		if st != http.StatusAccepted {
			t.Fatalf("slow redrive: %d %v", st, out)
		}
		slow := out["redrive_id"].(string)
		run(t, ctx, "open the running redrive", nav(e.url+"/#/redrives/"+slow),
			poll(`document.querySelector("#redrive") && document.querySelector("#redrive").dataset.status === "running" &&
				Number(document.querySelector("#redrive-replayed").textContent) > 0`))
		run(t, ctx, "cancel it", click("#redrive-cancel"), poll(`document.querySelector("#redrive").dataset.status === "canceled"`))
		// Resume waits until the canceled run's runner is gone.
		run(t, ctx, "resumable", poll(`document.querySelector("#redrive").dataset.runnerAlive === "false" &&
			!document.querySelector("#redrive-resume").disabled`))
		run(t, ctx, "resume it", click("#redrive-resume"),
			poll(`document.querySelector("#redrive") && document.querySelector("#redrive").dataset.status === "done" &&
				document.querySelector("#redrive-replayed").textContent === "6"`))

		// A viewer reads the same pages, with no action.
		vctx := browser(t)
		e.signIn(t, vctx, api.RoleViewer)
		run(t, vctx, "viewer's redrive page", nav(e.url+"/#/redrives/"+done), visible("#redrive-items"))
		if n := count(t, vctx, "#redrive-cancel, #redrive-resume"); n != 0 {
			t.Fatalf("a viewer sees %d redrive actions", n)
		}
	})
}
