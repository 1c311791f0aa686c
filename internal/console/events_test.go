package console_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// firstCursor answers the cursor of the first event of stream (read
// through the API).
// A new event is served once every earlier transaction settled (the log
// is gap-free: docs/events.md), so it polls until the stream has one.
func (e *env) firstCursor(t *testing.T, stream string) string {
	t.Helper()
	var cursor string
	testwait.For(t, "an event in stream "+stream, func() bool {
		st, out, _ := e.call(t, "GET", "/v1/events?stream="+url.QueryEscape(stream), api.RoleViewer, nil, nil)
		if st != http.StatusOK {
			t.Fatalf("events of %s: %d %v", stream, st, out)
		}
		items, _ := out["items"].([]any)
		if len(items) == 0 {
			return false
		}
		cursor = items[0].(map[string]any)["cursor"].(string)
		return true
	})
	return cursor
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
		// The page starts at the end of the log: a0, enqueued before, is
		// not shown until the operator asks for the log from its start.
		run(t, ctx, "following from now on", poll(`!!document.querySelector("main .view") && document.querySelector("main .view").dataset.from === "end"`))
		evalJS[bool](t, ctx, "wait 1s", `new Promise((r) => setTimeout(() => r(true), 1000))`)
		if n := count(t, ctx, "#events-rows tr"); n != 0 {
			t.Fatalf("the events page opened at the end of the log shows %d earlier events", n)
		}
		run(t, ctx, "from the start", click("#events-from-start"), poll(`location.hash.includes("after=")`))
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

// The live pages subscribe from the end of the log, not its start: each
// page's event stream names, as its after, a cursor no earlier than the
// log's end when the page opened (reading after it gives none of the
// tasks written before), and still updates live.
func TestBrowserLiveFromEnd(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		var old []string
		for range 3 {
			old = append(old, e.enqueue(t, map[string]any{"queue": "email", "kind": "send", "payload": map[string]any{}}))
		}
		// The three are final in the log (Postgres: once every earlier
		// transaction ended).
		for _, id := range old {
			e.firstCursor(t, "task."+id)
		}
		ctx := browser(t)
		var (
			mu   sync.Mutex
			urls []string
		)
		if err := chromedp.Listen(ctx, func(ev any) {
			if r, ok := ev.(*network.EventRequestWillBeSent); ok && strings.Contains(r.Request.URL, "/v1/events?stream=") {
				mu.Lock()
				urls = append(urls, r.Request.URL)
				mu.Unlock()
			}
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
			t.Fatal(err)
		}
		e.signIn(t, ctx, api.RoleViewer)
		streamOf := func(page, sel, stream string) string {
			t.Helper()
			run(t, ctx, "open "+page, nav(e.url+"/#"+page), visible(sel))
			var u string
			testwait.For(t, page+" to open stream "+stream, func() bool {
				mu.Lock()
				defer mu.Unlock()
				for _, x := range urls {
					if contains(x, "stream="+url.QueryEscape(stream)) {
						u = x
					}
				}
				urls = nil
				return u != ""
			})
			pu, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			after := pu.Query().Get("after")
			if after == "" {
				t.Fatalf("%s follows %s from the start of the log: %s", page, stream, u)
			}
			// Nothing written before the page opened is after its cursor.
			st, out, _ := e.call(t, "GET", "/v1/events?after="+url.QueryEscape(after), api.RoleViewer, nil, nil)
			if st != http.StatusOK {
				t.Fatalf("read after %q: %d %v", after, st, out)
			}
			for _, it := range out["items"].([]any) {
				if s, _ := it.(map[string]any)["subject"].(string); slices.Contains(old, s) {
					t.Fatalf("%s's stream (after %q) would replay %s's history", page, after, s)
				}
			}
			return after
		}
		streamOf("/", "main table", "all")
		streamOf("/dlq", "main h1", "type.task.dead_lettered")
		streamOf("/workers", "main h1", "all")
		streamOf("/tasks/"+old[0], "main h1", "task."+old[0])

		// Live all the same: a task enqueued now shows on the overview.
		streamOf("/", "main table", "all")
		e.enqueue(t, map[string]any{"queue": "sms", "kind": "send", "payload": map[string]any{}})
		waitText(t, ctx, "main table", "sms")
	})
}
