package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/internal/api"
)

// firstCursor answers the cursor of the first event of stream (read
// through the API).
func (e *env) firstCursor(t *testing.T, stream string) string {
	t.Helper()
	st, out, _ := e.call(t, "GET", "/v1/events?stream="+url.QueryEscape(stream), api.RoleViewer, nil, nil)
	items, _ := out["items"].([]any)
	if st != http.StatusOK || len(items) == 0 {
		t.Fatalf("events of %s: %d %v", stream, st, out)
	}
	return items[0].(map[string]any)["cursor"].(string)
}

// The events page follows a chosen stream live as tasks are enqueued
// (other streams' events stay out); pause stops the updates; resume behind
// a cursor shows only the events after it. Markup in an attribute is shown
// as text.
func TestBrowserEvents(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		const script = `<script>window.__pwned = 1</script>`
		const img = `<img src=x onerror="window.__pwned = 2">`
		a0 := e.enqueue(t, map[string]any{"queue": "email", "kind": "send", "payload": map[string]any{}})
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)

		run(t, ctx, "open Events from the nav", click(`#nav a[data-page="events"]`), visible("#events-stream"))
		run(t, ctx, "choose the stream queue.email",
			chromedp.SetValue(chromedp.CSS("#ev-kind"), "queue"), keys("#ev-name", "email"), submit("#events-stream"))
		run(t, ctx, "the stream is in the address", poll(`location.hash.includes("stream=queue.email")`))
		waitText(t, ctx, "#events-list", a0)
		evalJS[bool](t, ctx, "mark the page", `window.__mark = true`)

		// Live: enqueued after the page opened; another queue's task stays out.
		other := e.enqueue(t, map[string]any{"queue": "sms", "kind": "send", "payload": map[string]any{}})
		a1 := e.enqueue(t, map[string]any{"queue": "email", "kind": "send", "payload": map[string]any{},
			"attributes": map[string]string{"customer": img + script}})
		waitText(t, ctx, "#events-list", a1)
		list := text(t, ctx, "#events-list")
		if contains(list, other) {
			t.Fatalf("queue.email shows an sms task: %q", list)
		}
		if !contains(list, "customer="+img+script) || !contains(list, "task.enqueued") {
			t.Fatalf("events list: %q", list)
		}
		assertNothingRan(t, ctx, "events page")
		if !evalJS[bool](t, ctx, "the mark", `window.__mark === true`) {
			t.Fatal("the page was reloaded")
		}
		screenshot(t, ctx, "events")

		// Pause: the cursor box holds the last event's cursor; a task
		// enqueued now (in the log, as the API shows) is not shown.
		run(t, ctx, "pause", click("#events-pause"), poll(`document.querySelector("main .view, main").querySelector("#events-status").textContent.startsWith("Paused")`))
		a1Cursor := e.firstCursor(t, "task."+a1)
		if c := evalJS[string](t, ctx, "cursor box", `document.querySelector("#ev-cursor").value`); c != a1Cursor {
			t.Fatalf("cursor after pause: %q, want %q (a1's event)", c, a1Cursor)
		}
		b := e.enqueue(t, map[string]any{"queue": "email", "kind": "send", "payload": map[string]any{}})
		e.firstCursor(t, "task."+b) // in the log
		// Give a live stream ample time to deliver it (the server polls
		// every 200ms), then check it did not.
		evalJS[bool](t, ctx, "wait 1.5s", `new Promise((r) => setTimeout(() => r(true), 1500))`)
		if l := text(t, ctx, "#events-list"); contains(l, b) {
			t.Fatalf("a paused page showed a new event: %q", l)
		}

		// Resume after a0's event: a1 and b, never a0.
		a0Cursor := e.firstCursor(t, "task."+a0)
		run(t, ctx, "resume after a0", chromedp.SetValue(chromedp.CSS("#ev-cursor"), a0Cursor), submit("#events-resume-form"))
		waitText(t, ctx, "#events-list", b)
		l := text(t, ctx, "#events-list")
		if contains(l, a0) || !contains(l, a1) {
			t.Fatalf("resumed after a0's cursor: %q", l)
		}
		if n := count(t, ctx, "#events-rows tr"); n != 2 {
			t.Fatalf("resumed after a0: %d rows, want 2: %q", n, l)
		}
		assertNothingRan(t, ctx, "events page after resume")

		// A bad stream name is refused with the API's words, as text.
		run(t, ctx, "a bad stream", nav(e.url+"/#/events?stream=bogus.x"), visible("#events-error"))
		if msg := text(t, ctx, "#events-error"); !contains(msg, "400") {
			t.Fatalf("bad stream: %q", msg)
		}
	})
}
