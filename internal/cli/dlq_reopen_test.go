package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestDLQReplayReopen: `dlq replay` after `dlq resolve` (or discard) is a
// conflict (exit 4) naming the status and --reopen, and changes nothing;
// with --reopen the record runs
// again and the history names the actor and the status it came from.
func TestDLQReplayReopen(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "r")
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "d")
		killAll(t, e, "q", 2)
		e.ok("dlq", "resolve", "r", "--note", "by mistake")
		e.ok("dlq", "discard", "d", "--reason", "by mistake")
		for _, id := range []string{"r", "d"} {
			status := map[string]string{"r": "resolved", "d": "discarded"}[id]
			e.fails(ExitConflict, "dead letter "+id+" is "+status+", not open: not replayed; --reopen replays it anyway", "dlq", "replay", id)
			var before struct {
				Replayed  bool   `json:"replayed"`
				DLQStatus string `json:"dlq_status"`
			}
			if out := e.run("", "dlq", "replay", id, "-o", "json"); out.code != ExitConflict ||
				json.Unmarshal([]byte(out.stdout), &before) != nil || before.Replayed || before.DLQStatus != status {
				t.Fatalf("replay %s -o json without --reopen: exit %d, %s%s", id, out.code, out.stdout, out.stderr)
			}
			var r replayOut
			e.json(&r, "dlq", "replay", id, "--reopen", "--actor", "ann")
			if !r.Replayed || r.Task == nil || r.Task.State != backstop.StatePending {
				t.Fatalf("replay %s --reopen: %+v", id, r)
			}
			var shown struct {
				Events []backstop.Event `json:"events"`
			}
			e.json(&shown, "tasks", "show", id)
			last := shown.Events[len(shown.Events)-1]
			want := map[string]string{"r": `"from_status":"resolved"`, "d": `"from_status":"discarded"`}[id]
			if last.Type != "dlq.replayed" || last.Actor != "ann" || !strings.Contains(compact(last.Body), want) {
				t.Fatalf("%s: last event %+v, want dlq.replayed by ann with %s", id, last, want)
			}
		}
	})
}

// TestDLQReplayReopenOverServer: `dlq replay --reopen` over --server needs
// an admin token and replays a resolved dead letter.
func TestDLQReplayReopenOverServer(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "r")
	killAll(t, e, "q", 1)
	e.ok("dlq", "resolve", "r", "--note", "by mistake")
	admin := newRemoteEnv(t, e, "admin")
	var r replayOut
	out := admin.remote("", "dlq", "replay", "r", "-o", "json")
	if out.code != ExitConflict || !strings.Contains(out.stdout, `"replayed": false`) || !strings.Contains(out.stderr, "is resolved, not open") {
		t.Fatalf("replay without --reopen over --server: exit %d: %s%s", out.code, out.stdout, out.stderr)
	}
	out = admin.remote("", "dlq", "replay", "r", "--reopen", "-o", "json")
	if out.code != 0 {
		t.Fatalf("replay --reopen over --server: exit %d: %s", out.code, out.stderr)
	}
	if err := json.Unmarshal([]byte(out.stdout), &r); err != nil || !r.Replayed || r.Task.State != backstop.StatePending {
		t.Fatalf("replay --reopen over --server: %v %s", err, out.stdout)
	}
}
