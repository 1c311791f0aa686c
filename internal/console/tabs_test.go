package console_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/internal/api"
)

// Ten console tabs of one browser all render and stay live: the tabs share
// one long-lived connection to the event log (HTTP/1.1 allows a browser six
// per host; a stream per tab left the seventh tab unable to fetch at all).
// Shared by a SharedWorker, or, in a browser without one, by the tab that
// holds the Web Lock, passing its ticks over a BroadcastChannel.
func TestBrowserTenTabs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, setup string }{
		{"shared-worker", ""},
		{"broadcast-leader", "delete window.SharedWorker"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tenTabs(t, c.setup)
		})
	}
}

func tenTabs(t *testing.T, setup string) {
	e := newEnv(t, testdbSQLite(t), envOpts{})
	first := e.enqueue(t, map[string]any{"queue": "tabs", "kind": "k", "payload": map[string]any{}})
	ctx := browser(t)
	prepare := func(tab context.Context) {
		if setup == "" {
			return
		}
		if _, err := chromedp.Call(tab, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: setup}); err != nil {
			t.Fatal(err)
		}
	}
	prepare(ctx)
	e.signIn(t, ctx, api.RoleViewer)
	if setup != "" && evalJS[bool](t, ctx, "SharedWorker gone", `typeof SharedWorker === "function"`) {
		t.Fatal("the page still has SharedWorker")
	}
	// From the start of the log (the page's default is its end): the event
	// written before the tabs opened shows in each.
	url := e.url + "/#/events?stream=queue.tabs&after="
	tabs := []context.Context{ctx}
	for i := 1; i < 10; i++ {
		tab, cancel := chromedp.NewContext(ctx) // a new tab in the same browser context (same cookies)
		t.Cleanup(cancel)
		// Open the tab (about:blank) before navigating it: with chromedp
		// v0.23, a tab whose very first action is a navigation left later
		// evaluations in it waiting for ever.
		evalJS[int](t, tab, "open a tab", `1`)
		prepare(tab)
		tabs = append(tabs, tab)
	}
	for i, tab := range tabs {
		run(t, tab, fmt.Sprintf("open tab %d", i+1), nav(url), visible("#events-list"))
		waitText(t, tab, "#events-list", first)
	}
	// Every tab, the first nine included, receives an event written after
	// the tenth opened.
	next := e.enqueue(t, map[string]any{"queue": "tabs", "kind": "k", "payload": map[string]any{}})
	for _, tab := range tabs {
		waitText(t, tab, "#events-list", next)
	}
	// A page's own reads still answer in every tab (nothing is queued
	// behind held connections).
	for i, tab := range tabs {
		if got := evalJS[int](t, tab, fmt.Sprintf("fetch in tab %d", i+1),
			`fetch("/v1/events?stream=queue.tabs&limit=10", {credentials: "same-origin"}).then(r => r.status)`); got != 200 {
			t.Fatalf("tab %d: fetch answered %d", i+1, got)
		}
	}
}
