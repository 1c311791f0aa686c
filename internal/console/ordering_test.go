package console_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// The ordering page: an ordered queue's keys with their busy task (linked
// to its page), buffered counts and drain, 50 a page with the cursor,
// updated live from the queue's stream; a key holding markup is shown as
// text. The queue is chosen by keyboard.
func TestBrowserOrdering(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		bg := context.Background()
		// The server's client does not know the queue (it trusts keys);
		// this client has ordering enabled and runs admission.
		ol, err := backstop.NewClient(e.store, &backstop.Config{Clock: e.clock, Queues: map[string]backstop.QueueConfig{
			"results": {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1}}}})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]string{}
		enq := func(key string, seq int64) {
			t.Helper()
			tk, err := ol.Enqueue(bg, backstop.EnqueueParams{Queue: "results", Kind: "result", OrderingKey: key, Sequence: seq,
				Payload: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			if seq == 1 {
				ids[key] = tk.Task.ID
			}
		}
		order := func() {
			t.Helper()
			if err := ol.OrderQueue(bg, "results"); err != nil {
				t.Fatal(err)
			}
		}
		const img = `<img src=x onerror="window.__pwned = 3">`
		// 52 keys: the markup key sorts first (binary order and the
		// collations alike), then k00 … k50. Each key's first task is
		// admitted (busy); k01 then buffers 3 and 4 behind the gap at 2.
		enq(img, 1)
		for i := 0; i <= 50; i++ {
			enq(fmt.Sprintf("k%02d", i), 1)
		}
		order()
		enq("k01", 3)
		enq("k01", 4)
		order()

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "open Ordering from the nav", click(`#nav a[data-page="ordering"]`), visible("#of-queue"))
		run(t, ctx, "type the queue and press Enter", chromedp.Focus(chromedp.CSS("#of-queue")),
			chromedp.SendKeys(chromedp.CSS("#of-queue"), "results"+kb.Enter), visible("#ordering-keys table"))
		waitText(t, ctx, `#ordering-keys tr[data-key="k01"] td.buffered`, "2")
		if s := text(t, ctx, `#ordering-keys tr[data-key="k01"] td.drain`); s == "none" || s == "" {
			t.Fatalf("k01's drain: %q, want a time", s)
		}
		if s := text(t, ctx, `#ordering-keys tr[data-key="k00"] td.busy`); !contains(s, ids["k00"]) || !contains(s, "sequence 1") {
			t.Fatalf("k00's busy task: %q, want %s (sequence 1)", s, ids["k00"])
		}
		if n := count(t, ctx, "#ordering-keys tbody tr"); n != 50 {
			t.Fatalf("first page: %d keys, want 50", n)
		}
		if s := text(t, ctx, "#ordering-keys tbody tr:first-child th"); s != img {
			t.Fatalf("first key: %q, want the markup as text", s)
		}
		assertNothingRan(t, ctx, "ordering page")
		screenshot(t, ctx, "ordering")

		run(t, ctx, "the next page", click("#ordering-next"), visible(`#ordering-keys tr[data-key="k50"]`))
		if n := count(t, ctx, "#ordering-keys tbody tr"); n != 2 {
			t.Fatalf("second page: %d keys, want 2 (k49, k50)", n)
		}
		waitText(t, ctx, `#ordering-keys tr[data-key="k50"] td.buffered`, "0")

		// Live: k50 buffers a task behind a gap; the page shows it without a reload.
		evalJS[int](t, ctx, "mark the page", `window.__sameDocument = 1`)
		enq("k50", 5)
		order()
		waitText(t, ctx, `#ordering-keys tr[data-key="k50"] td.buffered`, "1")
		if v := evalJS[int](t, ctx, "same document", `window.__sameDocument || 0`); v != 1 {
			t.Fatal("the page reloaded")
		}

		// The busy task's link opens its task page.
		run(t, ctx, "open k50's busy task", click(`#ordering-keys tr[data-key="k50"] td.busy a`), visible("#task-state"))
		if h := evalJS[string](t, ctx, "address", `location.hash`); h != "#/tasks/"+ids["k50"] {
			t.Fatalf("busy task link: %q, want #/tasks/%s", h, ids["k50"])
		}

		// An unknown queue: an empty list, said in words.
		run(t, ctx, "an unknown queue", nav(e.url+"/#/ordering?queue=nosuch"), visible("#ordering-keys"))
		waitText(t, ctx, "#ordering-keys", "has no ordering keys")
	})
}
