package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
)

// reasonOf is the operator's reason in the body of the task's last event of
// type typ, with that event's actor ("" when there is none).
func (e *cliEnv) reasonOf(id, typ string) (reason, actor string) {
	e.t.Helper()
	var shown struct {
		Events []backstop.Event `json:"events"`
	}
	e.json(&shown, "tasks", "show", id)
	for _, ev := range shown.Events {
		if ev.Type != typ {
			continue
		}
		var b struct {
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(ev.Body, &b); err != nil {
			e.t.Fatalf("%s body %s: %v", typ, ev.Body, err)
		}
		reason, actor = b.Reason, ev.Actor
	}
	return reason, actor
}

// TestOperatorReasonCLI: replay, redrive (--why: its --reason filters),
// resolve, discard, cancel and purge take the operator's reason; it is
// recorded with the actor in the history's events and shown by `tasks
// show` and `dlq show`. A bad reason exits 2 naming the flag, nothing done.
func TestOperatorReasonCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		for _, id := range []string{"a", "b", "c", "d", "e"} {
			e.ok("enqueue", "--queue", "r", "--kind", "boom", "--id", id)
		}
		e.ok("enqueue", "--queue", "r2", "--kind", "boom", "--id", "p", "--payload", `{"n":1}`)
		e.ok("enqueue", "--queue", "later", "--kind", "k", "--id", "live", "--delay", "1h")
		killAll(t, e, "r", 5)
		killAll(t, e, "r2", 1)

		// Bad input: exit 2 naming the flag; nothing changes.
		long := strings.Repeat("x", backstop.MaxReasonBytes+1)
		e.fails(ExitUsage, "--reason", "dlq", "replay", "a", "--reason", long)
		e.fails(ExitUsage, "--reason", "dlq", "replay", "a", "--reason", "no\xff")
		e.fails(ExitUsage, "--reason", "dlq", "resolve", "a", "--reason", long)
		e.fails(ExitUsage, "--reason", "tasks", "cancel", "live", "--reason", long)
		e.fails(ExitUsage, "--reason", "dlq", "purge", "--older-than", "0s", "--reason", long, "--yes")
		e.fails(ExitUsage, "--why", "dlq", "redrive", "--queue", "r", "--why", long)
		e.fails(ExitUsage, "--why", "dlq", "redrive", "--queue", "r", "--reason", "the outage is over")
		if ids := e.dlqIDs("--queue", "r", "--status", "open"); strings.Join(ids, ",") != "a,b,c,d,e" {
			t.Fatalf("open after refused commands: %v", ids)
		}
		var live taskOut
		e.json(&live, "tasks", "show", "live")
		if live.State != backstop.StateScheduled {
			t.Fatalf("live after a refused cancel: %s", live.State)
		}

		// Replay: dlq.replay_requested and dlq.replayed carry it.
		e.ok("dlq", "replay", "a", "--reason", "fixed the upstream", "--actor", "alice")
		for _, typ := range []string{"dlq.replay_requested", "dlq.replayed"} {
			if r, who := e.reasonOf("a", typ); r != "fixed the upstream" || who != "alice" {
				t.Fatalf("a %s: reason %q actor %q", typ, r, who)
			}
		}
		if out := e.ok("tasks", "show", "a"); !strings.Contains(out, "replayed by alice: fixed the upstream") {
			t.Fatalf("tasks show a lacks the reason:\n%s", out)
		}

		// Resolve: --reason and the older --note, both kept.
		e.ok("dlq", "resolve", "b", "--reason", "refunded", "--note", "by hand", "--actor", "bob")
		if r, who := e.reasonOf("b", "dlq.resolved"); r != "refunded" || who != "bob" {
			t.Fatalf("b resolved: reason %q actor %q", r, who)
		}
		if out := e.ok("dlq", "show", "b"); !strings.Contains(out, "reason: refunded") {
			t.Fatalf("dlq show b lacks the reason:\n%s", out)
		}
		if out := e.ok("tasks", "show", "b"); !strings.Contains(out, "resolved: refunded (note: by hand) by bob") {
			t.Fatalf("tasks show b:\n%s", out)
		}
		e.ok("dlq", "discard", "c", "--reason", "obsolete")

		// Redrive: --why, in each replay's events (the set-based batch and
		// the patched one-by-one path).
		e.ok("dlq", "redrive", "--queue", "r", "--why", "the outage is over", "--actor", "carol")
		for _, id := range []string{"d", "e"} {
			if r, who := e.reasonOf(id, "dlq.replayed"); r != "the outage is over" || who != "carol" {
				t.Fatalf("%s redriven: reason %q actor %q", id, r, who)
			}
		}
		e.ok("dlq", "redrive", "--queue", "r2", "--patch", "n=2", "--why", "patched the bad field", "--actor", "carol")
		if r, _ := e.reasonOf("p", "dlq.replayed"); r != "patched the bad field" {
			t.Fatalf("p redriven with a patch: reason %q", r)
		}
		if out := e.ok("tasks", "show", "d"); !strings.Contains(out, "replayed by carol: the outage is over") {
			t.Fatalf("tasks show d:\n%s", out)
		}

		// Cancel.
		e.ok("tasks", "cancel", "live", "--reason", "wrong tenant")
		if r, who := e.reasonOf("live", "task.canceled"); r != "wrong tenant" || !strings.HasPrefix(who, "cli:") {
			t.Fatalf("live canceled: reason %q actor %q", r, who)
		}
		if out := e.ok("tasks", "show", "live"); !strings.Contains(out, ": wrong tenant") {
			t.Fatalf("tasks show live:\n%s", out)
		}

		// Purge: the records' history goes with them; the purge itself is
		// one dlq.purged event in the log.
		out := e.ok("dlq", "purge", "--older-than", "0s", "--below-floor", "--status", "discarded", "--reason", "gdpr request 42", "--actor", "dora", "--yes")
		if !strings.Contains(out, "purged 1 ") {
			t.Fatalf("purge: %s", out)
		}
		var page struct {
			Events []backstop.Event `json:"items"`
		}
		// The log serves an event once every earlier transaction ended:
		// poll until it does.
		testwait.For(t, "the dlq.purged event", func() bool {
			e.json(&page, "events", "tail", "--stream", "type.dlq.purged")
			return len(page.Events) > 0
		})
		if len(page.Events) != 1 || page.Events[0].Actor != "dora" || !strings.Contains(string(page.Events[0].Body), `"gdpr request 42"`) {
			t.Fatalf("dlq.purged events: %+v", page.Events)
		}
	})
}

// TestRequireReasonCLI: with BACKSTOP_DLQ_REQUIRE_REASON=true every operator
// action without a reason exits 2 naming it and changes nothing; with one,
// it runs. Not parallel: it sets the environment.
func TestRequireReasonCLI(t *testing.T) {
	t.Setenv("BACKSTOP_DLQ_REQUIRE_REASON", "true")
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) {
			e := &cliEnv{t: t, db: url(t)}
			for _, id := range []string{"a", "b"} {
				e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", id)
			}
			e.ok("enqueue", "--queue", "later", "--kind", "k", "--id", "live", "--delay", "1h")
			killAll(t, e, "q", 2)
			for _, args := range [][]string{
				{"dlq", "replay", "a"},
				{"dlq", "replay", "a", "--reason", "   "},
				{"dlq", "redrive", "--queue", "q"},
				{"dlq", "resolve", "a"},
				{"dlq", "resolve", "--queue", "q", "--yes"}, // by filter: refused before the count
				{"tasks", "cancel", "live"},
				{"dlq", "purge", "--older-than", "0s", "--status", "discarded", "--yes"},
			} {
				e.fails(ExitUsage, "reason: is required", args...)
			}
			if ids := e.dlqIDs("--status", "open"); strings.Join(ids, ",") != "a,b" {
				t.Fatalf("open after refused actions: %v", ids)
			}
			var live taskOut
			e.json(&live, "tasks", "show", "live")
			if live.State != backstop.StateScheduled {
				t.Fatalf("live: %s", live.State)
			}
			e.ok("dlq", "replay", "a", "--reason", "checked")
			e.ok("dlq", "resolve", "b", "--note", "handled by hand") // a note counts as the reason
			e.ok("tasks", "cancel", "live", "--reason", "not needed")
		})
	}
	t.Setenv("BACKSTOP_DLQ_REQUIRE_REASON", "maybe")
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	e.fails(ExitUsage, "BACKSTOP_DLQ_REQUIRE_REASON", "dlq", "replay", "x", "--reason", "r")
}

// TestPurgeOpenNeedsYesCLI: without a terminal, `dlq purge --status open`
// needs --yes (exit 2 naming it, nothing deleted); --dry-run counts
// without it; the default statuses never take an open dead letter.
func TestPurgeOpenNeedsYesCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		for _, id := range []string{"a", "b"} {
			e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", id)
		}
		killAll(t, e, "q", 2)
		e.fails(ExitUsage, "--yes", "dlq", "purge", "--status", "open", "--older-than", "0s")
		e.fails(ExitUsage, "--yes", "dlq", "purge", "--status", "discarded,open", "--older-than", "0s")
		if out := e.ok("dlq", "purge", "--older-than", "0s", "--below-floor"); !strings.Contains(out, "purged 0 ") {
			t.Fatalf("default purge: %s", out)
		}
		if out := e.ok("dlq", "purge", "--status", "open", "--older-than", "0s", "--below-floor", "--dry-run"); !strings.Contains(out, "would purge 2 ") {
			t.Fatalf("dry run: %s", out)
		}
		if ids := e.dlqIDs("--status", "open"); strings.Join(ids, ",") != "a,b" {
			t.Fatalf("open after refused purges: %v", ids)
		}
		if out := e.ok("dlq", "purge", "--status", "open", "--older-than", "0s", "--below-floor", "--yes"); !strings.Contains(out, "purged 2 ") {
			t.Fatalf("confirmed purge: %s", out)
		}
	})
}
