package console_test

import (
	"context"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// The Limits page shows each fair queue: the attribute its claims rotate
// across, the weights, and per value its waiting (pending) tasks, most
// first, each count linked to the tasks list of that value's pending
// tasks. A value holding markup is shown as text.
func TestBrowserFairQueues(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		bg := context.Background()
		const img = `<img src=x onerror="window.__pwned = 5">`

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "open Limits with no fair queue", nav(e.url+"/#/limits"), visible("#fair-none"))

		if _, err := e.lib.SetFair(bg, backstop.FairQueue{Queue: "crm", By: "tenant", Weights: map[string]int{"acme": 3}}, "ops"); err != nil {
			t.Fatal(err)
		}
		for _, tenant := range []string{"acme", "acme", "acme", "beta", img, ""} {
			attrs := map[string]string{"tenant": tenant}
			if tenant == "" {
				attrs = nil
			}
			if _, err := e.lib.Enqueue(bg, backstop.EnqueueParams{Queue: "crm", Kind: "sync", Attributes: attrs}); err != nil {
				t.Fatal(err)
			}
		}
		run(t, ctx, "reopen Limits", nav(e.url+"/#/audit"), visible("main"), nav(e.url+"/#/limits"), visible(`section.fair[data-queue="crm"] tbody`))
		if s := text(t, ctx, `section.fair[data-queue="crm"] h3`); s != "crm: fair by tenant" {
			t.Fatalf("fair heading: %q", s)
		}
		if s := text(t, ctx, `section.fair[data-queue="crm"] .weights`); !contains(s, "acme=3") {
			t.Fatalf("weights: %q", s)
		}
		rows := evalJS[[]string](t, ctx, "value rows", `[...document.querySelectorAll('section.fair[data-queue="crm"] tbody tr')].map((r) => [...r.cells].map((c) => c.textContent).join('|'))`)
		want := []string{"acme|3|3", "(none)|1|1", img + "|1|1", "beta|1|1"}
		if len(rows) != len(want) {
			t.Fatalf("value rows %q, want %q", rows, want)
		}
		for i := range want {
			if rows[i] != want[i] {
				t.Fatalf("value rows %q, want %q", rows, want)
			}
		}
		assertNothingRan(t, ctx, "fair queues")
		screenshot(t, ctx, "limits-fair")

		run(t, ctx, "open beta's waiting tasks", click(`section.fair[data-queue="crm"] a[aria-label*="tenant=beta"]`), visible("#task-filters-panel"))
		h := evalJS[string](t, ctx, "address", `location.hash`)
		for _, want := range []string{"queue=crm", "state=pending", "attr=tenant%3Dbeta"} {
			if !contains(h, want) {
				t.Fatalf("waiting link: %s, want %s", h, want)
			}
		}
	})
}
