package console_test

import (
	"testing"

	"github.com/backstophq/backstop/internal/api"
)

// A workflow fan-out item's task page says that its stored payload refers
// to the run's input, and links to the run; a plain task whose payload has
// the same key gets no such note.
func TestBrowserFanOutItemPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdbSQLite(t), envOpts{})
	item := e.enqueue(t, map[string]any{"id": "r7.each.3", "queue": "wf", "kind": "each",
		"payload":    map[string]any{"input_of_run": "r7", "item": 3, "index": 3, "results": map[string]any{}},
		"attributes": map[string]string{"run_id": "r7"}})
	plain := e.enqueue(t, map[string]any{"queue": "wf", "kind": "each", "payload": map[string]any{"input_of_run": "r7"}})
	ctx := browser(t)
	e.signIn(t, ctx, api.RoleViewer)
	run(t, ctx, "open the item", nav(e.url+"/#/tasks/"+item), visible("#payload-input"))
	if href := evalJS[string](t, ctx, "link", `document.querySelector("#payload-input a").getAttribute("href")`); href != "#/runs/r7" {
		t.Fatalf("the note links to %q", href)
	}
	run(t, ctx, "open the plain task", nav(e.url+"/#/tasks/"+plain),
		poll(`document.querySelector("main").textContent.includes("`+plain+`") && !!document.querySelector("#payload")`))
	if n := evalJS[int](t, ctx, "note", `document.querySelectorAll("#payload-input").length`); n != 0 {
		t.Fatal("a plain task's page says it is a fan-out item")
	}
}
