package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
)

// killAll runs a worker on queue q that fails every task permanently until
// n tasks are dead letters.
func killAll(t *testing.T, e *cliEnv, q string, n int) {
	t.Helper()
	runUntil(t, e.db, q, func(ctx context.Context, task *backstop.Task) error {
		return backstop.Permanent(errors.New("broken: " + task.ID))
	}, func(c *backstop.Client) bool {
		dead, err := c.DeadLetters(context.Background(), backstop.ListParams{Queue: q})
		return err == nil && len(dead) == n
	})
}

type replayOut struct {
	Replayed bool     `json:"replayed"`
	ID       string   `json:"id"`
	NewID    string   `json:"new_id"`
	Task     *taskOut `json:"task"`
}

func TestDLQReplayCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "a", "--payload", `{"user":{"email":"bad"},"s":"x"}`, "--attr", "tenant=acme")
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "b", "--idempotency-key", "k1")
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "c")
		killAll(t, e, "q", 3)

		// Patch refused: exit 2, nothing changes.
		e.fails(ExitUsage, "scalar", "dlq", "replay", "a", "--patch", "s.deep=1")
		e.fails(ExitUsage, "not both", "dlq", "replay", "a", "--delay", "1h", "--run-at", "2030-01-01T00:00:00Z")
		var a taskOut
		e.json(&a, "tasks", "show", "a")
		if a.State != backstop.StateDead || a.DLQStatus != backstop.DLQOpen {
			t.Fatalf("a changed by a refused patch: %+v", a.Task)
		}
		// --hold-key states what a replay always does on an ordered queue;
		// refusing the hold is refused (issue 17's flag).
		e.fails(ExitUsage, "--hold-key=false", "dlq", "replay", "a", "--hold-key=false")
		// Patched replay under the same id.
		var r replayOut
		e.json(&r, "dlq", "replay", "a", "--patch", "user.email=ok@example.com", "--actor", "alice", "--hold-key")
		if !r.Replayed || r.Task == nil || r.Task.ID != "a" || r.Task.State != backstop.StatePending {
			t.Fatalf("replay a: %+v", r)
		}
		if got := compact(r.Task.Payload); got != `{"s":"x","user":{"email":"ok@example.com"}}` {
			t.Fatalf("patched payload %s", got)
		}
		// Again: not in the DLQ any more, exit 0, replayed false.
		e.json(&r, "dlq", "replay", "a")
		if r.Replayed {
			t.Fatalf("second replay: %+v", r)
		}
		if out := e.ok("dlq", "replay", "a"); !strings.Contains(out, "not replayed") {
			t.Fatalf("table output: %q", out)
		}
		// History: the replay and who did it.
		var shown struct {
			Events []backstop.Event `json:"events"`
		}
		e.json(&shown, "tasks", "show", "a")
		var dlqEvents []backstop.Event
		for _, ev := range shown.Events {
			if strings.HasPrefix(ev.Type, "dlq.") {
				dlqEvents = append(dlqEvents, ev)
			}
		}
		if len(dlqEvents) != 3 || dlqEvents[0].Type != "dlq.replay_failed" || dlqEvents[2].Type != "dlq.replayed" || dlqEvents[2].Actor != "alice" {
			t.Fatalf("events: %+v", shown.Events)
		}
		if shown.Events[0].Type != "task.enqueued" || !strings.HasPrefix(shown.Events[0].Actor, "cli:") {
			t.Fatalf("the CLI's enqueue event: %+v", shown.Events[0])
		}
		// The timeline: enqueue, the attempt, the dead letter, the replays.
		out := e.ok("tasks", "show", "a")
		for _, want := range []string{"timeline (", "enqueued (pending", "attempt 1 claimed by worker", "attempt 1 failed: permanent_error",
			"dead letter: permanent_error after attempt 1", "replay refused", "replayed by alice", "now: pending"} {
			if !strings.Contains(out, want) {
				t.Fatalf("tasks show lacks %q:\n%s", want, out)
			}
		}
		e.fails(ExitNotFound, "not found", "dlq", "replay", "nope")

		// Conflict: a live task holds b's idempotency key.
		e.ok("enqueue", "--queue", "other", "--kind", "boom", "--id", "holder", "--idempotency-key", "k1")
		e.fails(ExitConflict, "uniqueness", "dlq", "replay", "b")

		// Merge patch from a file, with --new-id.
		mp := filepath.Join(t.TempDir(), "patch.json")
		if err := os.WriteFile(mp, []byte(`{"fixed":true}`), 0o600); err != nil {
			t.Fatal(err)
		}
		e.json(&r, "dlq", "replay", "c", "--merge-patch", mp, "--new-id")
		if !r.Replayed || r.NewID == "" || r.Task.ReplayedFrom != "c" || compact(r.Task.Payload) != `{"fixed":true}` {
			t.Fatalf("new id: %+v", r)
		}
		var ids []string
		ids = e.dlqIDs("--status", "replayed")
		if len(ids) != 1 || ids[0] != "c" {
			t.Fatalf("replayed list %v", ids)
		}
		e.fails(ExitUsage, "status", "dlq", "list", "--status", "bogus")
	})
}

func TestDLQDiscardResolvePurgeExportCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		for _, id := range []string{"d", "r", "o"} {
			e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", id)
		}
		killAll(t, e, "q", 3)
		e.fails(ExitUsage, "--reason is required", "dlq", "discard", "d")
		var d taskOut
		e.json(&d, "dlq", "discard", "d", "--reason", "obsolete")
		if d.DLQStatus != backstop.DLQDiscarded {
			t.Fatalf("discard: %+v", d.Task)
		}
		e.fails(ExitNotFound, "not an open dead letter", "dlq", "discard", "d", "--reason", "again")
		e.fails(ExitNotFound, "not an open dead letter", "dlq", "resolve", "nope")
		e.ok("dlq", "resolve", "r", "--note", "refunded by hand")
		if ids := e.dlqIDs("--status", "discarded,resolved"); strings.Join(ids, ",") != "d,r" {
			t.Fatalf("closed: %v", ids)
		}
		if ids := e.dlqIDs("--error-contains", "broken: o"); strings.Join(ids, ",") != "o" {
			t.Fatalf("error-contains: %v", ids)
		}

		// Export: NDJSON, one dead letter per line, with executions and events.
		out := filepath.Join(t.TempDir(), "dlq.ndjson")
		e.ok("dlq", "export", "--out", out)
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var lines []map[string]json.RawMessage
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			lines = append(lines, m)
		}
		if len(lines) != 3 || !strings.HasPrefix(string(lines[0]["executions"]), "[{") || lines[0]["events"] == nil {
			t.Fatalf("export: %d lines, first %v", len(lines), lines)
		}
		if n := strings.Count(e.ok("dlq", "export", "--status", "open"), "\n"); n != 1 {
			t.Fatalf("export --status open: %d lines", n)
		}

		e.fails(ExitUsage, "--older-than", "dlq", "purge")
		var purged map[string]int
		e.json(&purged, "dlq", "purge", "--older-than", "1d", "--below-floor")
		if purged["purged"] != 0 {
			t.Fatalf("purged too early: %v", purged)
		}
		e.json(&purged, "dlq", "purge", "--older-than", "0s", "--below-floor")
		if purged["purged"] != 2 {
			t.Fatalf("purged: %v", purged)
		}
		e.fails(ExitNotFound, "not found", "tasks", "show", "d")
		if ids := e.dlqIDs(); strings.Join(ids, ",") != "o" {
			t.Fatalf("left: %v", ids)
		}
	})
}

func TestDLQRedriveCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		for _, id := range []string{"t1", "t2", "t3", "t4"} {
			e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", id)
		}
		killAll(t, e, "q", 4)
		out := e.ok("dlq", "redrive", "--queue", "q", "--rate", "0", "-o", "json")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var last backstop.RedriveProgress
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if !last.Done || last.Replayed != 4 || last.Total != 4 {
			t.Fatalf("redrive: %s", out)
		}
		if out := e.ok("dlq", "redrive", "--queue", "q"); !strings.Contains(out, "nothing matched") {
			t.Fatalf("second redrive: %s", out)
		}
		e.fails(ExitUsage, "rate", "dlq", "redrive", "--all", "--rate", "-1")
	})
}

// A redrive that selects nothing needs --all, and --all takes no
// selection (exit 2, nothing replayed); with --all it redrives every open
// dead letter, on the database and through a server alike.
func TestDLQRedriveNeedsAll(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		for _, id := range []string{"a1", "a2"} {
			e.ok("enqueue", "--queue", "qa", "--kind", "boom", "--id", id)
		}
		killAll(t, e, "qa", 2)
		r := newRemoteEnv(t, e, "admin")
		e.fails(ExitUsage, "--all, alone, selects every open dead letter", "dlq", "redrive", "--yes")
		e.fails(ExitUsage, "cannot be narrowed by --queue", "dlq", "redrive", "--yes", "--all", "--queue", "qa")
		if res := r.remote("", "dlq", "redrive", "--yes"); res.code != ExitUsage || !strings.Contains(res.stderr, "--all") {
			t.Fatalf("remote dlq redrive without --all: exit %d %s", res.code, res.stderr)
		}
		if n := len(e.dlqIDs("--status", "open")); n != 2 {
			t.Fatalf("open after refused redrives: %d, want 2", n)
		}
		if out := r.same("dlq", "redrive", "--all", "--dry-run").stdout; !strings.Contains(out, "would redrive 2 dead letters") {
			t.Fatalf("dry run --all: %s", out)
		}
		if res := r.remote("", "dlq", "redrive", "--all", "--yes"); res.code != 0 || !strings.Contains(res.stdout, "2 replayed") {
			t.Fatalf("remote dlq redrive --all: exit %d %s %s", res.code, res.stdout, res.stderr)
		}
	})
}

func (e *cliEnv) dlqIDs(args ...string) []string {
	e.t.Helper()
	var ts []taskOut
	e.json(&ts, append([]string{"dlq", "list"}, args...)...)
	ids := []string{}
	for _, x := range ts {
		ids = append(ids, x.ID)
	}
	return ids
}
