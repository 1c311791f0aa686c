package console_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/internal/api"
)

// gate holds back the requests of one path while it is closed.
type gate struct {
	path string
	mu   sync.Mutex
	open chan struct{} // closed: the requests go through
}

func newGate(path string) *gate {
	g := &gate{path: path, open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == g.path {
			g.mu.Lock()
			ch := g.open
			g.mu.Unlock()
			select {
			case <-ch:
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// The dead letters' list is shown as soon as GET /v1/dlq answers: the
// groups, the totals and the bulk panel's "all N" follow when GET
// /v1/dlq/groups answers (held back here). A bulk replay's panel (its
// text, progress and buttons) stays through every re-render of the page
// while the groups are held back: the re-read at its end, a live refresh,
// and a filter changed and changed back.
func TestBrowserDLQListBeforeGroups(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		groups := newGate("/v1/dlq/groups")
		e := newEnv(t, dbURL, envOpts{wrap: groups.wrap})
		for i := range 3 {
			e.deadLetter(t, map[string]any{"queue": "later", "kind": "k", "payload": map[string]any{"n": i}}, "bank timeout")
		}
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)
		defer groups.release()

		// The list while the groups are held: rows, the bulk panel without
		// its actions, no groups.
		groups.hold()
		within(t, ctx, 10*time.Second, "the list before its groups", nav(e.url+"/#/dlq?queue=later&status=open"),
			poll(`document.querySelectorAll("#dlq-list tbody tr").length === 3`))
		if n := count(t, ctx, "#dlq-groups, #bulk-replay, #close-discard"); n != 0 {
			t.Fatalf("%d of the groups' and the bulk actions' elements shown before the groups answered", n)
		}
		if s := text(t, ctx, "#dlq-total"); s != "counting…" {
			t.Fatalf("the total before the groups: %q", s)
		}
		if n := count(t, ctx, "#bulk #bulk-text"); n != 1 {
			t.Fatalf("the bulk panel before the groups: %d status lines", n)
		}
		groups.release()
		run(t, ctx, "the groups", poll(`document.querySelector("#dlq-groups") && document.querySelector("#dlq-groups").dataset.total === "3" &&
			document.querySelector("#dlq-total").textContent === "3 match" && document.querySelector("#bulk-replay").textContent === "Replay all 3 matching this filter" &&
			document.querySelector("#close-discard").textContent === "Discard all 3 matching" && document.querySelector("#dlq-export").textContent.includes("3")`))

		// A bulk replay, its end re-reading the page while the groups are held.
		run(t, ctx, "replay all 3", chromedp.SetValue(chromedp.CSS("#bulk-rate"), "2"), click("#bulk-replay"),
			poll(`document.querySelector("#bulk").dataset.status === "running"`))
		groups.hold()
		run(t, ctx, "the replay ends; the page is read again", poll(`document.querySelectorAll("#dlq-list tbody tr").length === 0 &&
			document.querySelector("#bulk").dataset.status === "done" && document.querySelector("#bulk-text").textContent.includes("3 of 3 replayed") &&
			document.querySelector("#bulk-cancel").hidden && document.querySelector("#bulk-rate").value === ""`))
		assertBulkDone := func(what string) {
			t.Helper()
			if s := text(t, ctx, "#bulk-text"); !contains(s, "3 of 3 replayed") || !contains(s, "done") {
				t.Fatalf("%s: the bulk panel says %q", what, s)
			}
			if v := evalJS[float64](t, ctx, "progress", `Number(document.querySelector("#bulk-progress").value)`); v != 3 {
				t.Fatalf("%s: progress %v, want 3", what, v)
			}
		}
		assertBulkDone("re-read at the end")

		// A live refresh (new dead letters of the filter: the helper's claims
		// take the three replayed tasks too, and they die again) while the
		// groups are held: the new rows, the finished replay still shown.
		e.deadLetter(t, map[string]any{"queue": "later", "kind": "k", "payload": map[string]any{"n": 9}}, "bank timeout")
		within(t, ctx, 20*time.Second, "the live refresh", poll(`document.querySelectorAll("#dlq-list tbody tr").length === 4`))
		assertBulkDone("after the live refresh")
		groups.release()
		run(t, ctx, "the fresh groups", poll(`document.querySelector("#dlq-total").textContent === "4 match" &&
			document.querySelector("#bulk-replay").textContent === "Replay all 4 matching this filter"`))
		assertBulkDone("after the fresh groups")

		// Another filter and back: the replay of this one is shown again.
		run(t, ctx, "another queue", nav(e.url+"/#/dlq?queue=elsewhere&status=open"), visible("#dlq-groups"))
		if s := text(t, ctx, "#bulk-text"); s != "" {
			t.Fatalf("another filter's bulk panel shows %q", s)
		}
		groups.hold()
		run(t, ctx, "back", nav(e.url+"/#/dlq?queue=later&status=open"), poll(`document.querySelectorAll("#dlq-list tbody tr").length === 4`))
		assertBulkDone("back to the filter")
		groups.release()
	})
}

// within runs actions as run does, with its own limit.
func within(t *testing.T, ctx context.Context, d time.Duration, what string, actions ...act) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
		t.Fatalf("%s: %v\npage: %s", what, err, page)
	}
}
