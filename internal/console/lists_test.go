package console_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/internal/api"
)

// The task and dead-letter lists: state tabs with the server's counts
// (kept live), newest or oldest first (dead letters newest first by
// default), and at a 1400×900 window at least 15 rows in view below the
// collapsed filter panel; ids are shortened, each with a copy button; a
// payload is collapsible and copyable; a typo in the where box is said
// beside the box and the form stays.
func TestBrowserListTabsAndDensity(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		var dead []string
		for i := range 20 {
			dead = append(dead, e.deadLetter(t, map[string]any{"queue": "dens", "kind": "k", "payload": map[string]any{"n": i}},
				"a rather long error message that would wrap the row of a narrow table in two or three lines"))
		}
		var pending []string
		for i := range 20 {
			pending = append(pending, e.enqueue(t, map[string]any{"queue": "dens-t", "kind": "k", "payload": map[string]any{"n": i, "note": "x"}}))
		}

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)
		// As an operator who never opened a panel, at 1400×900.
		run(t, ctx, "panels as they start", poll(`(() => { for (const p of `+panelIDs+`) localStorage.removeItem("backstop.panel." + p); return true })()`),
			chromedp.EmulateViewport(1400, 900))
		inView := func(list string) int {
			return evalJS[int](t, ctx, "rows in view", fmt.Sprintf(`[...document.querySelectorAll("%s tbody tr")].filter((r) => r.getBoundingClientRect().bottom <= window.innerHeight).length`, list))
		}

		// Dead letters: open tab marked with its count, newest first.
		// The tabs' counts arrive after the list (the list does not wait).
		counted := func(tabs string) act {
			return poll(`document.querySelector('#` + tabs + ` .count').textContent !== ""`)
		}
		run(t, ctx, "the dead letters", nav(e.url+"/#/dlq"), visible("#dlq-tabs"), visible("#dlq-list tbody tr"), counted("dlq-tabs"))
		tab := func(list, state string) string {
			return evalJS[string](t, ctx, "tab "+state, fmt.Sprintf(`(() => { const a = document.querySelector('#%s a[data-state="%s"]'); return a ? a.getAttribute("aria-current") + " " + a.querySelector(".count").textContent : "none" })()`, list, state))
		}
		if got := tab("dlq-tabs", "open"); got != "page 20" {
			t.Fatalf("open tab: %q, want the current tab with 20", got)
		}
		if got := tab("dlq-tabs", "resolved"); got != "null 0" {
			t.Fatalf("resolved tab: %q", got)
		}
		first := evalJS[string](t, ctx, "first row", `document.querySelector("#dlq-list tbody [data-id]").dataset.id`)
		if first != dead[len(dead)-1] {
			t.Fatalf("first dead letter: %s, want the newest %s", first, dead[len(dead)-1])
		}
		if open := evalJS[bool](t, ctx, "filters panel", `document.querySelector("#dlq-filters-panel").open`); open {
			t.Fatal("the filter panel starts open")
		}
		if n := inView("#dlq-list"); n < 15 {
			t.Fatalf("%d dead letters in view at 1400×900, want at least 15", n)
		}
		screenshot(t, ctx, "dlq-list")
		// A short id: its whole id in its title, a copy button beside it.
		short := evalJS[string](t, ctx, "short id", `document.querySelector("#dlq-list tbody a[data-id]").textContent`)
		if len(short) < 8 || len(short) >= len(first) || !contains(first, short[len(short)-8:]) {
			t.Fatalf("the shown id %q is not a shortening of %q", short, first)
		}
		run(t, ctx, "copy the id", click("#dlq-list tbody button.copy"),
			poll(`document.querySelector("#dlq-list tbody button.copy").dataset.copied === "true"`))
		run(t, ctx, "oldest first", choose("#dlq-order", "oldest"),
			poll(`location.hash.includes("order=oldest") && document.querySelector("#dlq-list tbody [data-id]") && document.querySelector("#dlq-list tbody [data-id]").dataset.id === "`+dead[0]+`"`))
		// Live: a new dead letter shows in the tab's count without a reload.
		evalJS[bool](t, ctx, "mark", `window.__mark = true`)
		e.deadLetter(t, map[string]any{"queue": "dens", "kind": "k", "payload": map[string]any{}}, "late")
		run(t, ctx, "the open count goes to 21", poll(`document.querySelector('#dlq-tabs a[data-state="open"] .count').textContent === "21"`))
		if !evalJS[bool](t, ctx, "mark kept", `window.__mark === true`) {
			t.Fatal("the page reloaded")
		}

		// A typo in the where box: the error beside it, the form kept.
		run(t, ctx, "a bad where", nav(e.url+"/#/dlq?where="+"payload.n%20%3D%3D"), visible("#where-error"))
		if msg := text(t, ctx, "#where-error"); !contains(msg, "400") || !contains(msg, "where") {
			t.Fatalf("where error: %q", msg)
		}
		if v := evalJS[string](t, ctx, "the where kept", `document.querySelector("#f-where").value`); v != "payload.n ==" {
			t.Fatalf("where box: %q", v)
		}
		if h1 := text(t, ctx, "main h1"); h1 != "Dead letters" {
			t.Fatalf("the page was replaced: %q", h1)
		}

		// Tasks: tabs with counts; the pending tab narrows the list.
		run(t, ctx, "the tasks", nav(e.url+"/#/tasks"), visible("#task-tabs"), visible("#task-list tbody tr"), counted("task-tabs"))
		if got := tab("task-tabs", "pending"); got != "null 20" {
			t.Fatalf("pending tab: %q", got)
		}
		if got := tab("task-tabs", "dead"); got != "null 21" {
			t.Fatalf("dead tab: %q", got)
		}
		if got := tab("task-tabs", ""); got != "page 41" {
			t.Fatalf("all tab: %q", got)
		}
		run(t, ctx, "the pending tab", click(`#task-tabs a[data-state="pending"]`),
			poll(`location.hash.includes("state=pending") && document.querySelectorAll("#task-list tbody tr").length === 20`))
		if n := inView("#task-list"); n < 15 {
			t.Fatalf("%d tasks in view at 1400×900, want at least 15", n)
		}
		run(t, ctx, "newest first", choose("#task-order", "newest"),
			poll(`location.hash.includes("order=newest") && document.querySelector("#task-list tbody [data-id]") &&
				document.querySelector("#task-list tbody [data-id]").dataset.id === "`+pending[len(pending)-1]+`"`))
		screenshot(t, ctx, "task-list")
		run(t, ctx, "a bad where on tasks", nav(e.url+"/#/tasks?where="+"payload.(%20"), visible("#where-error"))
		if msg := text(t, ctx, "#where-error"); !contains(msg, "400") {
			t.Fatalf("tasks where error: %q", msg)
		}
		if n := count(t, ctx, "#task-filters"); n != 1 {
			t.Fatal("the tasks' filter form is gone")
		}

		// The payload: collapsible, copyable.
		run(t, ctx, "a task", nav(e.url+"/#/tasks/"+pending[0]), visible("#payload"))
		if !evalJS[bool](t, ctx, "payload block", `(() => { const d = document.querySelector("#payload").closest("details"); return !!d && d.open && !!d.querySelector("summary button.copy") })()`) {
			t.Fatal("the payload is not in an open, collapsible block with a copy button")
		}
		run(t, ctx, "collapse it", click("details.json-block > summary"), poll(`!document.querySelector("#payload").closest("details").open`))
		run(t, ctx, "copy it", click("details.json-block summary button.copy"),
			poll(`document.querySelector("details.json-block summary button.copy").dataset.copied === "true"`))
		if open := evalJS[bool](t, ctx, "still collapsed", `document.querySelector("#payload").closest("details").open`); open {
			t.Fatal("the copy button toggled the block")
		}
	})
}

// choose picks value in a select, as a user does (its change handler
// runs); once.
func choose(sel, value string) act {
	return poll(fmt.Sprintf(`(() => { const s = document.querySelector(%q); if (!s) return false;
		if (s.value !== %q) { s.value = %q; s.dispatchEvent(new Event("change")); } return true })()`, sel, value, value))
}
