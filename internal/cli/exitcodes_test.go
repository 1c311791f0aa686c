package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runs resume and dlq redrive say what happened: an unknown run is exit 3
// and writes no redrive record; a finished run is exit 4 naming its state
// and writes none either; a redrive that matches nothing says so and
// leaves a record marked empty, never done.
func TestResumeAndRedriveTellTheTruth(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		def := "name: ship\nqueue: wf\nsteps:\n  - {id: pack, kind: pack}\n"
		file := filepath.Join(t.TempDir(), "ship.yaml")
		if err := os.WriteFile(file, []byte(def), 0o644); err != nil {
			t.Fatal(err)
		}
		e.ok("workflows", "apply", file)
		e.ok("workflows", "run", "ship", "--run-id", "done-1")
		e.ok("runs", "cancel", "done-1")
		e.ok("workflows", "run", "ship", "--run-id", "live-1")

		records := func() []map[string]any {
			var rs []map[string]any
			e.json(&rs, "redrives", "list")
			return rs
		}
		e.fails(ExitNotFound, `run "NO-SUCH-RUN": not found`, "runs", "resume", "NO-SUCH-RUN", "--yes")
		e.fails(ExitNotFound, `run "NO-SUCH-RUN": not found`, "dlq", "redrive", "--run", "NO-SUCH-RUN", "--yes", "--dry-run")
		e.fails(ExitConflict, `run "done-1" is canceled: it finished`, "runs", "resume", "done-1", "--yes")
		if rs := records(); len(rs) != 0 {
			t.Fatalf("refused resumes wrote redrive records: %v", rs)
		}

		out := e.ok("runs", "resume", "live-1", "--yes")
		if !strings.Contains(out, "nothing matched") || strings.Contains(out, "done") {
			t.Fatalf("resume of a run without dead steps: %q", out)
		}
		out = e.ok("dlq", "redrive", "--queue", "nothing-here", "--yes")
		if !strings.Contains(out, "nothing matched") {
			t.Fatalf("redrive matching nothing: %q", out)
		}
		rs := records()
		if len(rs) != 2 {
			t.Fatalf("records: %v", rs)
		}
		for _, r := range rs {
			if r["status"] != "empty" {
				t.Fatalf("a redrive that matched nothing is recorded %v, want empty", r["status"])
			}
		}
		id, _ := rs[0]["id"].(string)
		e.fails(ExitConflict, "is empty; nothing to resume", "redrives", "resume", id)
	})
}
