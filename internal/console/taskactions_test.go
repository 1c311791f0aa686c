package console_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/store"
)

// The tasks list's actions: an admin picks two rows and runs them now
// (few and not a delete: no confirm); "all matching" delete without a
// reason is refused on the page; with one it shows how many match and a
// sample, and waits for its confirm; a task that started running between
// that preview and the confirm is not deleted; another queue's tasks are
// untouched; each task deleted has its task.deleted event by the admin.
// Then a picked row that is running now: skipped, and the flash says so.
func TestBrowserTaskActions(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		var ids []string
		for i := range 6 {
			ids = append(ids, e.enqueue(t, map[string]any{"queue": "ta", "kind": "k", "delay": "1h", "payload": map[string]any{"n": i}}))
		}
		other := e.enqueue(t, map[string]any{"queue": "ta-other", "kind": "k", "delay": "1h", "payload": map[string]any{}})
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)

		run(t, ctx, "the queue's tasks", nav(e.url+"/#/tasks?queue=ta"), visible("#task-list tbody input.pick"),
			click("#task-actions-panel summary"), visible("#ta-action"))
		run(t, ctx, "pick two, run now", click(fmt.Sprintf(`input.pick[data-id=%q]`, ids[0])), click(fmt.Sprintf(`input.pick[data-id=%q]`, ids[1])),
			poll(`document.querySelector("#ta-count").textContent === "2 selected"`),
			setValue("#ta-action", "task.run_now"), click("#ta-picked"),
			poll(`document.querySelector("#flash").textContent.startsWith("run now: 2 changed, 0 skipped")`))
		for i, id := range ids {
			want := bt.StateScheduled
			if i < 2 {
				want = bt.StatePending
			}
			if got := e.task(t, id).State; got != want {
				t.Fatalf("%s is %s, want %s", id, got, want)
			}
		}

		run(t, ctx, "delete all without a reason", poll(`document.querySelectorAll("#task-list tbody tr").length === 6 &&
			document.querySelectorAll("#task-list tbody input.pick:checked").length === 0`), poll(`(() => { const d = document.querySelector("#task-actions-panel"); if (!d) return false;
			d.open = true; return true; })()`), visible("#ta-action"),
			setValue("#ta-action", "task.delete"), click("#ta-all"),
			poll(`document.querySelector("#ta-error").textContent.includes("reason")`))
		run(t, ctx, "delete all: the preview", keys("#ta-reason", "bad batch"), click("#ta-all"),
			poll(`document.querySelector("#ta-matched") && document.querySelector("#ta-matched").dataset.matched === "6" &&
				document.querySelectorAll("#ta-preview li.sample").length === 5`))
		screenshot(t, ctx, "tasks-bulk-delete")
		if _, err := e.lib.Get(t.Context(), ids[2]); err != nil {
			t.Fatalf("deleted before the confirm: %v", err)
		}
		// One of them starts running before the confirm: no longer in a
		// state a delete selects, it is left to its worker.
		claimed, err := e.store.Claim(t.Context(), store.ClaimParams{Queue: "ta", WorkerID: "w", Max: 1, Now: time.Now(), Lease: time.Minute})
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		run(t, ctx, "delete all: confirm", click("#ta-confirm"),
			poll(`document.querySelector("#flash").textContent.startsWith("delete: 5 changed, 0 skipped")`))
		for _, id := range ids {
			_, err := e.lib.Get(t.Context(), id)
			if id == claimed[0].ID {
				if err != nil || e.task(t, id).State != bt.StateRunning {
					t.Fatalf("the running task %s: %v", id, err)
				}
				continue
			}
			if !errors.Is(err, backstop.ErrNotFound) {
				t.Fatalf("%s not deleted: %v", id, err)
			}
			evs, err := e.lib.Events(t.Context(), id)
			if err != nil || !hasEvent(evs, "task.deleted", "console-admin") {
				t.Fatalf("%s: no task.deleted by console-admin: %v", id, err)
			}
		}
		if got := e.task(t, other).State; got != bt.StateScheduled {
			t.Fatalf("another queue's task is %s", got)
		}
		run(t, ctx, "pick the running one, delete", poll(`document.querySelectorAll("#task-list tbody tr").length === 1`), poll(`(() => { const d = document.querySelector("#task-actions-panel"); if (!d) return false;
			d.open = true; return true; })()`), visible("#ta-action"),
			click(fmt.Sprintf(`input.pick[data-id=%q]`, claimed[0].ID)), setValue("#ta-action", "task.delete"), keys("#ta-reason", "bad batch"),
			click("#ta-picked"), poll(`document.querySelector("#ta-matched") && document.querySelector("#ta-matched").dataset.matched === "0"`))
		run(t, ctx, "the running one: nothing to confirm", poll(`document.querySelector("#ta-confirm").hidden`))
		run(t, ctx, "run now the running one", setValue("#ta-action", "task.run_now"), click("#ta-picked"),
			poll(`document.querySelector("#flash").textContent.startsWith("run now: 0 changed, 1 skipped")`))
		if got := e.task(t, claimed[0].ID).State; got != bt.StateRunning {
			t.Fatalf("the running task is %s", got)
		}
	})
}

// setValue sets a form control's value as a user would: with its change
// event.
func setValue(sel, v string) act {
	return poll(fmt.Sprintf(`(() => { const x = document.querySelector(%q); if (!x) return false; x.value = %q;
		x.dispatchEvent(new Event("change", { bubbles: true })); return true; })()`, sel, v))
}
