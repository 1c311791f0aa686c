package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// The where filter (a CEL condition on payload and attributes) narrows the
// tasks list and the dead letters (the list, the counts and "replay all N
// matching", which replays only those); it lives in the address; a bad
// expression is an error naming where, and nothing is listed.
func TestBrowserWhereFilters(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		var gold, basic []string
		for i := range 7 {
			tier := "gold"
			if i%2 == 1 {
				tier = "basic"
			}
			id := e.deadLetter(t, map[string]any{"queue": "w", "kind": "charge", "payload": map[string]any{"tier": tier, "n": i}}, "bank timeout")
			if tier == "gold" {
				gold = append(gold, id)
			} else {
				basic = append(basic, id)
			}
		}
		for i := range 5 {
			e.enqueue(t, map[string]any{"queue": "wt", "kind": "mail", "payload": map[string]any{"customer": map[string]any{"id": i}},
				"attributes": map[string]string{"tenant": map[bool]string{true: "acme", false: "other"}[i < 2]}})
		}
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)

		run(t, ctx, "tasks where", nav(e.url+"/#/tasks?queue=wt"), visible("#f-where"),
			chromedp.SetValue(chromedp.CSS("#f-where"), `attributes.tenant == "acme" && payload.customer.id >= 1`), submit("#task-filters"),
			poll(`location.hash.includes("where=") && document.querySelectorAll("#task-list tbody tr").length === 1`))
		if v := evalJS[string](t, ctx, "the where kept", `document.querySelector("#f-where").value`); v != `attributes.tenant == "acme" && payload.customer.id >= 1` {
			t.Fatalf("the where input after the filter: %q", v)
		}

		run(t, ctx, "dead letters where", nav(e.url+"/#/dlq?queue=w&status=open"), visible("#f-where"),
			chromedp.SetValue(chromedp.CSS("#f-where"), `payload.tier == "gold"`), submit("#dlq-filters"),
			poll(`document.querySelector("#dlq-groups") && document.querySelector("#dlq-groups").dataset.total === "4" &&
				document.querySelectorAll("#dlq-list tbody tr").length === 4`))
		run(t, ctx, "replay all 4 matching", click("#bulk-replay"),
			poll(`document.querySelector("#bulk").dataset.status === "done" && document.querySelector("#bulk-progress").value === 4`))
		for _, id := range gold {
			if tk := e.task(t, id); tk.State == bt.StateDead || tk.ReplayCount != 1 {
				t.Fatalf("gold %s: %s, %d replays", id, tk.State, tk.ReplayCount)
			}
		}
		for _, id := range basic {
			if tk := e.task(t, id); tk.State != bt.StateDead || tk.ReplayCount != 0 {
				t.Fatalf("basic %s was touched: %s, %d replays", id, tk.State, tk.ReplayCount)
			}
		}

		run(t, ctx, "a bad where", nav(e.url+"/#/dlq?queue=w&status=open&where=payload.tier%20%3D%3D"),
			poll(`document.body.innerText.includes("where")  && document.body.innerText.includes("400")`))
		if n := count(t, ctx, "#dlq-list tbody tr"); n != 0 {
			t.Fatalf("a bad where listed %d rows", n)
		}
	})
}
