package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// Sign in; the overview shows each queue with its counts and DLQ size;
// pause a queue from it; sign out.
func TestBrowserOverview(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		for i := range 3 {
			e.enqueue(t, map[string]any{"queue": "email", "kind": "send", "payload": map[string]any{"n": i}})
		}
		e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge", "payload": map[string]any{"amount": 1}}, "card declined")
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)

		for _, c := range cookies(t, ctx) {
			if c.Name == api.SessionCookie && (!c.HTTPOnly || c.SameSite != "Strict") {
				t.Fatalf("session cookie in the browser: %+v", c)
			}
		}
		waitText(t, ctx, "main table", "billing")
		table := text(t, ctx, "main table")
		if !contains(table, "email") {
			t.Fatalf("overview table: %q", table)
		}
		if dlq := text(t, ctx, `a[aria-label="Dead letters in billing: 1"]`); dlq != "1" {
			t.Fatalf("billing DLQ size: %q", dlq)
		}
		screenshot(t, ctx, "overview")
		// Dark mode follows the system's preference.
		light := evalJS[string](t, ctx, "background", `getComputedStyle(document.body).backgroundColor`)
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
			t.Fatal(err)
		}
		if dark := evalJS[string](t, ctx, "background", `getComputedStyle(document.body).backgroundColor`); dark == light || dark != "rgb(21, 22, 26)" {
			t.Fatalf("dark mode: background %s (light %s)", dark, light)
		}
		screenshot(t, ctx, "overview-dark")

		run(t, ctx, "pause email", click(`button[data-action="pause"][data-queue="email"]`),
			visible(`button[data-action="resume"][data-queue="email"]`))
		qs, err := e.lib.Queues(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Name == "email" && (!q.Paused || q.PausedBy != "console-admin") {
				t.Fatalf("email after pause: %+v", q)
			}
		}

		run(t, ctx, "sign out", click("#signout"), visible("#token"))
		if st, _, _ := e.call(t, "GET", "/v1/queues", api.RoleNone, nil, nil); st != http.StatusUnauthorized {
			t.Fatalf("after sign-out: %d", st)
		}
	})
}

// Filter the DLQ by error text; replay one with a merge patch after
// previewing the result (the store holds the patched payload); discard
// another with a reason; resolve a third with a note.
func TestBrowserDeadLetters(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		a := e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge",
			"payload":    map[string]any{"amount": 500, "currency": "EUR", "card": "4111", "password": "hunter2"},
			"attributes": map[string]string{"tenant": "acme"}}, "card declined: insufficient funds")
		b := e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge", "payload": map[string]any{"amount": 7}}, "timeout talking to the bank")
		c := e.deadLetter(t, map[string]any{"queue": "email", "kind": "send", "payload": map[string]any{"to": "x@example.com"}}, "mailbox full")
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)

		run(t, ctx, "open the DLQ", nav(e.url+"/#/dlq"), visible("#dlq-list table"))
		waitID(t, ctx, "#dlq-list", c)
		if n := count(t, ctx, "#dlq-list tbody tr"); n != 3 {
			t.Fatalf("DLQ rows: %d, want 3", n)
		}
		run(t, ctx, "filter by error text",
			keys("#f-error", "declined"),
			submit("#dlq-filters"),
			poll(`document.querySelectorAll("#dlq-list tbody tr").length === 1`))
		if l := listIDs(t, ctx, "#dlq-list"); !contains(l, a) || contains(l, b) {
			t.Fatalf("filtered list: %q", l)
		}
		screenshot(t, ctx, "dlq")
		// The attribute and time filters, from the address (a link to a filtered list).
		run(t, ctx, "filter by attribute and age", nav(e.url+"/#/dlq?attr=tenant%3Dacme&since=1h"),
			poll(`document.querySelector("#f-attr") && document.querySelector("#f-attr").value === "tenant=acme" &&
				document.querySelectorAll("#dlq-list tbody tr").length === 1`))
		if l := listIDs(t, ctx, "#dlq-list"); !contains(l, a) {
			t.Fatalf("attribute filter: %q", l)
		}
		run(t, ctx, "a filter nothing matches", nav(e.url+"/#/dlq?attr=tenant%3Dnone"),
			poll(`document.querySelector("#dlq-list") && document.querySelector("#dlq-list").textContent.includes("No dead letter matches")`))

		// Replay a with a patch, previewed first.
		run(t, ctx, "open a from the list", nav(e.url+"/#/dlq?attr=tenant%3Dacme"), click(`#dlq-list a[href="#/dlq/`+a+`"]`),
			visible("#replay-form"))
		if p := text(t, ctx, "#payload"); !contains(p, "[REDACTED]") || contains(p, "hunter2") {
			t.Fatalf("the payload is not shown masked: %q", p)
		}
		// An admin's "show raw" is audited in the task's history.
		run(t, ctx, "show raw", click("#show-raw"))
		waitText(t, ctx, "#payload", "hunter2")
		if evs, err := e.lib.Events(context.Background(), a); err != nil || !hasEvent(evs, "task.payload_viewed", "console-admin") {
			t.Fatalf("no task.payload_viewed by console-admin: %v %+v", err, evs)
		}
		run(t, ctx, "preview the patch",
			keys("#merge-patch", `{"amount": 5, "card": null}`),
			click("#replay-preview"),
			visible("#replay-confirm"))
		prev := text(t, ctx, "#preview")
		if !contains(prev, `"amount": 5`) || contains(prev, "4111") || !contains(prev, `"currency": "EUR"`) {
			t.Fatalf("preview: %q", prev)
		}
		if tk := e.task(t, a); tk.State != bt.StateDead || tk.DLQStatus != bt.DLQOpen {
			t.Fatalf("the preview changed the task: %s %s", tk.State, tk.DLQStatus)
		}
		screenshot(t, ctx, "dlq-replay")
		run(t, ctx, "confirm", click("#replay-confirm"),
			visible("#task-state"))
		tk := e.task(t, a)
		var payload map[string]any
		if err := json.Unmarshal(tk.Payload, &payload); err != nil {
			t.Fatal(err)
		}
		if tk.State != bt.StatePending || tk.ID != a || payload["amount"] != float64(5) || payload["currency"] != "EUR" || payload["password"] != "hunter2" {
			t.Fatalf("after the replay: state %s payload %s", tk.State, tk.Payload)
		}
		if _, ok := payload["card"]; ok {
			t.Fatalf("the merge patch did not remove card: %s", tk.Payload)
		}
		evs, err := e.lib.Events(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		if !hasEvent(evs, "dlq.replayed", "console-admin") {
			t.Fatalf("no dlq.replayed by console-admin in %+v", evs)
		}

		// Discard b with a reason.
		run(t, ctx, "discard b", nav(e.url+"/#/dlq/"+b), visible("#discard-form"),
			keys("#discard-reason", "duplicate charge"),
			submit("#discard-form"))
		waitText(t, ctx, "#dlq-status", "discarded")
		if tk := e.task(t, b); tk.DLQStatus != bt.DLQDiscarded {
			t.Fatalf("b: %s", tk.DLQStatus)
		}
		evs, _ = e.lib.Events(context.Background(), b)
		if !hasEventWith(evs, "duplicate charge") {
			t.Fatalf("the reason is not in b's history: %+v", evs)
		}

		// Resolve c with a note.
		run(t, ctx, "resolve c", nav(e.url+"/#/dlq/"+c), visible("#resolve-form"),
			keys("#resolve-note", "fixed by hand"),
			submit("#resolve-form"))
		waitText(t, ctx, "#dlq-status", "resolved")
		if tk := e.task(t, c); tk.DLQStatus != bt.DLQResolved {
			t.Fatalf("c: %s", tk.DLQStatus)
		}
	})
}

func hasEvent(evs []bt.Event, typ, actor string) bool {
	for _, ev := range evs {
		if ev.Type == typ && ev.Actor == actor {
			return true
		}
	}
	return false
}

func hasEventWith(evs []bt.Event, s string) bool {
	for _, ev := range evs {
		if strings.Contains(string(ev.Body), s) {
			return true
		}
	}
	return false
}

// fetchJS is a same-origin request made from the page with the session's
// cookie; csrf says whether it carries the session's CSRF token. It
// answers the status.
func fetchJS(method, path string, csrf bool) string {
	hdr := `{"Content-Type": "application/json"}`
	if csrf {
		hdr = `{"Content-Type": "application/json", "X-Backstop-CSRF": s.csrf}`
	}
	return fmt.Sprintf(`fetch("/console/session").then(r => r.json()).then(s =>
		fetch(%q, {method: %q, headers: %s, body: "{}", credentials: "same-origin"})).then(r => r.status)`, path, method, hdr)
}

// A viewer sees no admin or operator action, and an admin request forged
// from a viewer's session (CSRF token included) is refused with 403.
func TestBrowserViewer(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		d := e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge", "payload": map[string]any{"amount": 1}}, "card declined")
		p := e.enqueue(t, map[string]any{"queue": "email", "kind": "send", "payload": map[string]any{"n": 1}})
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)

		waitText(t, ctx, "main table", "billing")
		if n := count(t, ctx, "button[data-action]"); n != 0 {
			t.Fatalf("a viewer sees %d pause/resume buttons", n)
		}
		run(t, ctx, "open the dead letter", nav(e.url+"/#/dlq/"+d), visible("#no-actions"))
		if n := count(t, ctx, "#replay-form, #discard-form, #resolve-form, #replay-confirm, #show-raw"); n != 0 {
			t.Fatalf("a viewer sees %d DLQ actions", n)
		}
		screenshot(t, ctx, "dlq-viewer")
		run(t, ctx, "open the task", nav(e.url+"/#/tasks/"+p), visible("#task-state"))
		if n := count(t, ctx, "#cancel"); n != 0 {
			t.Fatal("a viewer sees the cancel button")
		}

		for _, req := range [][2]string{{"POST", "/v1/dlq/" + d + "/replay"}, {"POST", "/v1/dlq/" + d + "/discard"},
			{"POST", "/v1/queues/email/pause"}, {"POST", "/v1/tasks/" + p + "/cancel"}} {
			status := evalJS[int](t, ctx, "forge "+req[1], fetchJS(req[0], req[1], true))
			if status != http.StatusForbidden {
				t.Fatalf("forged %s %s from a viewer's session: %d, want 403", req[0], req[1], status)
			}
		}
		if tk := e.task(t, d); tk.State != bt.StateDead || tk.DLQStatus != bt.DLQOpen {
			t.Fatalf("the dead letter changed: %s %s", tk.State, tk.DLQStatus)
		}
		if tk := e.task(t, p); tk.State != bt.StatePending {
			t.Fatalf("the task changed: %s", tk.State)
		}
	})
}

// A mutating request from the signed-in page without the CSRF token is
// refused; the same with it goes through.
func TestBrowserCSRF(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		e.enqueue(t, map[string]any{"queue": "email", "kind": "send", "payload": map[string]any{"n": 1}})
		ctx := browser(t)
		// Sign in with the keyboard only: the token, then Enter.
		run(t, ctx, "sign in by keyboard", nav(e.url+"/"), visible("#token"),
			keys("#token", e.secret[api.RoleAdmin]+kb.Enter), poll(`document.querySelector("#who").dataset.role === "admin"`))
		status := evalJS[int](t, ctx, "pause without CSRF", fetchJS("POST", "/v1/queues/email/pause", false))
		if status != http.StatusForbidden {
			t.Fatalf("pause without the CSRF token: %d, want 403", status)
		}
		if qs, _ := e.lib.Queues(context.Background()); qs[0].Paused {
			t.Fatal("the queue was paused without the CSRF token")
		}
		status = evalJS[int](t, ctx, "pause with CSRF", fetchJS("POST", "/v1/queues/email/pause", true))
		if status != http.StatusOK {
			t.Fatalf("pause with the CSRF token: %d", status)
		}
	})
}

// Values from a task (payload, attribute, error text, log line, kind-free
// text everywhere) holding markup render as text and run nothing.
func TestBrowserXSS(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		const script = `<script>window.__pwned = 1</script>`
		const img = `<img src=x onerror="window.__pwned = 2">`
		id := e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge",
			"payload":    map[string]any{"note": script, "img": img},
			"attributes": map[string]string{"customer": img + script}},
			"boom "+img+script, "log "+img, "log "+script)
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)

		pwned := func(where string) {
			t.Helper()
			v := evalJS[string](t, ctx, "read the flag", `String(window.__pwned)`)
			if v != "undefined" {
				t.Fatalf("%s: the payload ran (window.__pwned = %s)", where, v)
			}
			if n := count(t, ctx, "main img, main script, #flash img, #flash script"); n != 0 {
				t.Fatalf("%s: %d elements were made from task data", where, n)
			}
		}
		run(t, ctx, "the DLQ list", nav(e.url+"/#/dlq"), visible("#dlq-list table"))
		waitText(t, ctx, "#dlq-list", img)
		pwned("DLQ list")

		run(t, ctx, "the dead letter", nav(e.url+"/#/dlq/"+id), visible("#payload"))
		if p := text(t, ctx, "#payload"); !contains(p, "<script>window.__pwned = 1</script>") {
			t.Fatalf("payload text: %q", p)
		}
		if a := text(t, ctx, "#attributes"); !contains(a, img) {
			t.Fatalf("attribute text: %q", a)
		}
		if le := text(t, ctx, "#last-error"); !contains(le, img) || !contains(le, script) {
			t.Fatalf("error text: %q", le)
		}
		pwned("dead letter page")

		tk := e.task(t, id)
		exec := tk.ExecutionID
		run(t, ctx, "the task page with its log", nav(e.url+"/#/tasks/"+id+"?log="+exec),
			visible("#log-lines"))
		if l := text(t, ctx, "#log-lines"); !contains(l, "log "+img) || !contains(l, "log "+script) {
			t.Fatalf("log text: %q", l)
		}
		if x := text(t, ctx, "#executions"); !contains(x, img) {
			t.Fatalf("executions: %q", x)
		}
		pwned("task page")
		screenshot(t, ctx, "task")
	})
}

// The tasks list filters and pages with the server's cursor; the task page
// cancels a waiting task (operator).
func TestBrowserTasks(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		var tasks []map[string]any
		for i := range 60 {
			tasks = append(tasks, map[string]any{"queue": "reports", "kind": "render", "payload": map[string]any{"n": i},
				"attributes": map[string]string{"run_id": "r1"}, "progress": map[string]any{"total_steps": 10, "completed_steps": i % 10}})
		}
		if st, out, _ := e.call(t, "POST", "/v1/tasks/batch", api.RoleOperator, map[string]any{"tasks": tasks}, nil); st != http.StatusCreated {
			t.Fatalf("batch: %d %v", st, out)
		}
		other := e.enqueue(t, map[string]any{"queue": "email", "kind": "send", "payload": map[string]any{}})
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleOperator)
		run(t, ctx, "filter tasks", nav(e.url+"/#/tasks"), visible("#task-filters"),
			keys("#f-queue", "reports"),
			submit("#task-filters"),
			poll(`location.hash.includes("queue=reports") && document.querySelectorAll("#task-list tbody tr").length === 50`))
		if l := listIDs(t, ctx, "#task-list"); contains(l, other) {
			t.Fatal("the filter let another queue's task through")
		}
		run(t, ctx, "next page", click(`a[rel="next"]`),
			poll(`document.querySelectorAll("#task-list tbody tr").length === 10`))
		if n := count(t, ctx, `a[rel="next"]`); n != 0 {
			t.Fatal("the last page offers a next page")
		}
		first := evalJS[string](t, ctx, "the first task", `document.querySelector("#task-list tbody a").dataset.id`)
		run(t, ctx, "open a task", click("#task-list tbody a"), visible("#cancel"))
		screenshot(t, ctx, "task-pending")
		run(t, ctx, "cancel it", click("#cancel"))
		waitText(t, ctx, "#task-state", "canceled")
		if tk := e.task(t, first); tk.State != bt.StateCanceled {
			t.Fatalf("after cancel: %s", tk.State)
		}
		evs, _ := e.lib.Events(context.Background(), first)
		if !hasEvent(evs, "task.canceled", "console-operator") {
			t.Fatalf("no task.canceled by console-operator: %+v", evs)
		}
	})
}

// The pages follow the event stream: a change made elsewhere shows up
// without a reload (the overview's counts; the task page's state).
func TestBrowserLive(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		id := e.enqueue(t, map[string]any{"queue": "email", "kind": "send", "payload": map[string]any{"n": 1}})
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		waitText(t, ctx, "main table", "email")
		// Mark the page: a reload would lose the mark.
		evalJS[bool](t, ctx, "mark the page", `window.__mark = true`)
		e.enqueue(t, map[string]any{"queue": "reports", "kind": "render", "payload": map[string]any{}})
		waitText(t, ctx, "main table", "reports")

		run(t, ctx, "open the task", nav(e.url+"/#/tasks/"+id), visible("#task-state"))
		waitText(t, ctx, "#task-state", "pending")
		if st, out, _ := e.call(t, "POST", "/v1/tasks/"+id+"/cancel", api.RoleOperator, nil, nil); st != http.StatusOK {
			t.Fatalf("cancel: %d %v", st, out)
		}
		waitText(t, ctx, "#task-state", "canceled")
		waitText(t, ctx, "#timeline", "task.canceled")
		if !evalJS[bool](t, ctx, "the mark", `window.__mark === true`) {
			t.Fatal("the page was reloaded")
		}
	})
}

// The log of a running attempt is followed live: lines a worker writes
// after the page opened appear without a reload.
func TestBrowserLogFollow(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		id := e.enqueue(t, map[string]any{"queue": "reports", "kind": "render", "payload": map[string]any{}})
		st, out, _ := e.call(t, "POST", "/v1/claim", api.RoleOperator, map[string]any{"queues": []string{"reports"}, "worker_id": "w1", "lease": "5m"}, nil)
		tasks, _ := out["tasks"].([]any)
		if st != http.StatusOK || len(tasks) != 1 {
			t.Fatalf("claim: %d %v", st, out)
		}
		claimed := tasks[0].(map[string]any)
		lease := claimed["lease_token"].(string)
		logLine := func(line string) {
			t.Helper()
			if st, out, _ := e.call(t, "POST", "/v1/tasks/"+id+"/logs", api.RoleOperator,
				map[string]any{"lease_token": lease, "lines": []map[string]string{{"stream": "output", "line": line}}}, nil); st != http.StatusOK {
				t.Fatalf("logs: %d %v", st, out)
			}
		}
		logLine("rendering page 1")
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "open the running task", nav(e.url+"/#/tasks/"+id), visible("#current-log"))
		run(t, ctx, "follow its log", click("#current-log"), visible("#log-following"))
		waitText(t, ctx, "#log-lines", "rendering page 1")
		evalJS[bool](t, ctx, "mark the page", `window.__mark = true`)
		logLine("rendering page 2")
		waitText(t, ctx, "#log-lines", "rendering page 2")
		if !evalJS[bool](t, ctx, "the mark", `window.__mark === true`) {
			t.Fatal("the page was reloaded")
		}
		screenshot(t, ctx, "task-running")
		if got := text(t, ctx, "#log-lines"); strings.Count(got, "rendering page 1") != 1 {
			t.Fatalf("a line shown twice: %q", got)
		}
	})
}
