package console_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// A debounced task's page says how it is debounced: its key, the quiet
// period it waits for and when it runs at the latest (its first enqueue
// plus the max wait), or that it has no max wait; a task that is not
// debounced shows none of it. A key holding markup is shown as text.
func TestBrowserDebouncedTask(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		bg := context.Background()
		const img = `<img src=x onerror="window.__pwned = 6">`
		enqueue := func(p backstop.EnqueueParams) *backstop.Task {
			t.Helper()
			r, err := e.lib.Enqueue(bg, p)
			if err != nil {
				t.Fatal(err)
			}
			return r.Task
		}
		capped := enqueue(backstop.EnqueueParams{Queue: "docs", Kind: "reindex",
			Debounce: &backstop.Debounce{Key: img, For: 5 * time.Second, MaxWait: time.Minute}})
		again := enqueue(backstop.EnqueueParams{Queue: "docs", Kind: "reindex",
			Debounce: &backstop.Debounce{Key: img, For: 5 * time.Second, MaxWait: time.Minute}})
		if again.ID != capped.ID {
			t.Fatalf("the second enqueue made %s, want it debounced into %s", again.ID, capped.ID)
		}
		open := enqueue(backstop.EnqueueParams{Queue: "docs", Kind: "reindex", Debounce: &backstop.Debounce{Key: "doc-2", For: time.Hour}})
		plain := enqueue(backstop.EnqueueParams{Queue: "docs", Kind: "reindex", MergeKey: "m-1"})

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "open the debounced task", nav(e.url+"/#/tasks/"+capped.ID), visible("#task-debounce"))
		if s := text(t, ctx, "#task-debounce-key"); s != img {
			t.Fatalf("debounce key %q, want %q as text", s, img)
		}
		if s := text(t, ctx, "#task-debounce-for"); s != "5s" {
			t.Fatalf("debounce period %q, want 5s", s)
		}
		until := evalJS[string](t, ctx, "the max-wait deadline", `document.querySelector('#task-debounce-until').getAttribute('datetime')`)
		if at, err := time.Parse(time.RFC3339Nano, until); err != nil || !at.Equal(capped.CreatedAt.Add(time.Minute)) {
			t.Fatalf("runs at the latest %q (%v), want %s", until, err, capped.CreatedAt.Add(time.Minute))
		}
		assertNothingRan(t, ctx, "debounced task")
		screenshot(t, ctx, "task-debounced")

		run(t, ctx, "open the task without a max wait", nav(e.url+"/#/tasks/"+open.ID), visible("#task-debounce"))
		if s := text(t, ctx, "#task-debounce-until"); s != "no max wait" {
			t.Fatalf("without a max wait: %q", s)
		}
		if s := text(t, ctx, "#task-debounce-for"); s != "1h0m0s" {
			t.Fatalf("debounce period %q, want 1h0m0s", s)
		}
		run(t, ctx, "open a merge key's task", nav(e.url+"/#/tasks/"+plain.ID), visible("#task-state"))
		if n := evalJS[int](t, ctx, "debounce facts", `document.querySelectorAll('#task-debounce').length`); n != 0 {
			t.Fatalf("a task that is not debounced shows its debounce")
		}
	})
}
