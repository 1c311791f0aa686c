package cli

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop"
)

// TestDLQReplayReopen: `dlq replay` after `dlq resolve` (or discard) says
// replayed: false and points at --reopen; with --reopen the record runs
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
			if out := e.ok("dlq", "replay", id); !strings.Contains(out, "replayed: false; --reopen replays it anyway") {
				t.Fatalf("replay %s without --reopen: %q", id, out)
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
