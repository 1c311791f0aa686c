package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

func TestEventsTailCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "q1", "--kind", "k", "--id", "a", "--attr", "run_id=r1")
		e.ok("enqueue", "--queue", "q2", "--kind", "k", "--id", "b")
		e.ok("tasks", "cancel", "b")

		// On Postgres an event is served once every older transaction has
		// ended (gap-free reads), and parallel tests hold transactions of
		// their own: wait until the three are final, then read as a user.
		var page backstop.EventPage
		testwait.For(t, "the three events", func() bool {
			page = backstop.EventPage{}
			e.json(&page, "events", "tail")
			return len(page.Events) >= 3
		})
		if len(page.Events) != 3 || page.Events[2].Type != "task.canceled" || !strings.HasPrefix(page.Events[2].Actor, "cli:") {
			t.Fatalf("all: %+v", page)
		}
		// Paging: one at a time, from the cursor of the previous page.
		var first, rest backstop.EventPage
		e.json(&first, "events", "tail", "--limit", "1")
		e.json(&rest, "events", "tail", "--after", first.Next)
		if len(first.Events) != 1 || len(rest.Events) != 2 || rest.Events[0].Subject != "b" {
			t.Fatalf("paged: %+v then %+v", first, rest)
		}
		var byQueue backstop.EventPage
		e.json(&byQueue, "events", "tail", "--stream", "queue.q2")
		if len(byQueue.Events) != 2 || byQueue.Events[0].Subject != "b" {
			t.Fatalf("queue.q2: %+v", byQueue)
		}
		var byRun backstop.EventPage
		e.json(&byRun, "events", "tail", "--stream", "run.r1")
		if len(byRun.Events) != 1 || byRun.Events[0].Subject != "a" {
			t.Fatalf("run.r1: %+v", byRun)
		}
		if out := e.ok("events", "tail", "--stream", "type.task.canceled"); !strings.Contains(out, "task.canceled") || strings.Contains(out, "task.enqueued") {
			t.Fatalf("type stream table: %s", out)
		}
		e.fails(ExitUsage, "invalid stream", "events", "tail", "--stream", "nope")
		e.fails(ExitUsage, "invalid cursor", "events", "tail", "--after", "x")
		e.fails(ExitUsage, "--limit", "events", "tail", "--limit", "0")
	})
}

// events tail masks the payload fragments in event bodies on the database
// as the server does over --server (docs/redaction.md).
func TestEventsTailMasked(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		ev := store.NewEvent(time.Now(), "dlq.replay_requested", "t1", "q", "k", "ops", []byte(`{"merge_patch":{"password":"hunter2"}}`))
		if err := e.client().Store().AppendEvents(t.Context(), []bt.Event{ev}); err != nil {
			t.Fatal(err)
		}
		var out string
		testwait.For(t, "the event", func() bool {
			out = e.ok("events", "tail", "--stream", "type.dlq.replay_requested", "-o", "json")
			return strings.Contains(out, "merge_patch")
		})
		if strings.Contains(out, "hunter2") || !strings.Contains(out, "[REDACTED]") {
			t.Fatalf("events tail shows a redacted key: %s", out)
		}
	})
}
