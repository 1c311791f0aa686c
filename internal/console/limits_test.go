package console_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/store"
)

// The limits page: each limit with its type, value and use (running
// tasks; a rate limit's burst and tokens) and its waiting tasks, linked
// to the tasks list filtered to them; a per limit's budgets one by one;
// the task page of a held-back task says why it waits. A budget value
// holding markup is shown as text.
func TestBrowserLimits(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		bg := context.Background()
		const img = `<img src=x onerror="window.__pwned = 4">`
		for _, l := range []backstop.Limit{
			{Name: "heavy1", Queue: "lim", Kind: "heavy", Per: "tenant", Concurrency: 1},
			{Name: "slow", Queue: "mail", Rate: 0.001}, // one start per 1000 s, burst 1
		} {
			if _, err := e.lib.SetLimit(bg, l, "ops"); err != nil {
				t.Fatal(err)
			}
		}
		var acme []string
		for _, tenant := range []string{"acme", "acme", img, img} {
			r, err := e.lib.Enqueue(bg, backstop.EnqueueParams{Queue: "lim", Kind: "heavy", Attributes: map[string]string{"tenant": tenant}})
			if err != nil {
				t.Fatal(err)
			}
			if tenant == "acme" {
				acme = append(acme, r.Task.ID)
			}
		}
		for range 3 {
			if _, err := e.lib.Enqueue(bg, backstop.EnqueueParams{Queue: "mail", Kind: "send"}); err != nil {
				t.Fatal(err)
			}
		}
		claim := func(queue string) []*backstop.Task {
			t.Helper()
			ts, err := e.store.Claim(bg, store.ClaimParams{Queue: queue, WorkerID: "w", Max: 10, Now: e.clock.Now(),
				Lease: time.Hour, Limited: true})
			if err != nil {
				t.Fatal(err)
			}
			return ts
		}
		if n := len(claim("lim")); n != 2 {
			t.Fatalf("claimed %d of lim, want one per tenant", n)
		}
		if n := len(claim("mail")); n != 1 {
			t.Fatalf("claimed %d of mail, want the burst of 1", n)
		}

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "open Limits from the nav", click(`#nav a[data-page="limits"]`), visible("#limits table"))
		if s := text(t, ctx, `#limits tr[data-limit="heavy1"] td.value`); s != "1 at once" {
			t.Fatalf("heavy1's limit: %q", s)
		}
		if s := text(t, ctx, `#limits tr[data-limit="heavy1"] td.use`); s != "2 running (1 per tenant)" {
			t.Fatalf("heavy1's use: %q, want 2 running (one per tenant) of 1", s)
		}
		waitText(t, ctx, `#limits tr[data-limit="heavy1"] td.waiting`, "2")
		if s := text(t, ctx, `#limits tr[data-limit="slow"] td.value`); s != "0.001/s, burst 1" {
			t.Fatalf("slow's limit: %q", s)
		}
		if s := text(t, ctx, `#limits tr[data-limit="slow"] td.use`); !contains(s, "1 running") || !contains(s, "0.0 tokens") {
			t.Fatalf("slow's use: %q, want 1 running and no whole token", s)
		}
		waitText(t, ctx, `#limits tr[data-limit="slow"] td.waiting`, "2")
		if s := text(t, ctx, `section.budgets[data-limit="heavy1"] tbody`); !contains(s, img) || !contains(s, "acme") {
			t.Fatalf("heavy1's budgets: %q, want acme's and the markup tenant's, as text", s)
		}
		assertNothingRan(t, ctx, "limits page")
		screenshot(t, ctx, "limits")

		// acme's waiting count leads to the tasks list of acme's pending
		// tasks of the scope, and on to the task, which says why it waits.
		run(t, ctx, "open acme's waiting tasks", click(`section.budgets[data-limit="heavy1"] a[aria-label*="tenant=acme"]`), visible("#task-filters-panel"))
		h := evalJS[string](t, ctx, "address", `location.hash`)
		for _, want := range []string{"queue=lim", "state=pending", "kind=heavy", "attr=tenant%3Dacme"} {
			if !contains(h, want) {
				t.Fatalf("waiting link: %s, want %s", h, want)
			}
		}
		waiting := acme[0]
		if tk, err := e.lib.Get(bg, waiting); err != nil || tk.State != backstop.StatePending {
			waiting = acme[1]
		}
		waitID(t, ctx, "main", waiting)
		run(t, ctx, "open the waiting task", nav(e.url+"/#/tasks/"+waiting), visible("#task-waiting"))
		waitText(t, ctx, "#task-waiting", "concurrency limit heavy1 tenant=acme 1/1")

		// Live: a third tenant's task shows up in the counts within a reread.
		run(t, ctx, "back to Limits", nav(e.url+"/#/limits"), visible("#limits table"))
		for range 2 {
			if _, err := e.lib.Enqueue(bg, backstop.EnqueueParams{Queue: "mail", Kind: "send"}); err != nil {
				t.Fatal(err)
			}
		}
		waitText(t, ctx, `#limits tr[data-limit="slow"] td.waiting`, "4")
	})
}
