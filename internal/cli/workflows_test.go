package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The workflow commands on both stores: apply (from stdin too), the same
// definition again is the same version, list, show, run with a caller's
// run id (again: exit 4), runs list and show, cancel; bad input exits 2
// naming the problem and writes nothing.
func TestWorkflowCommands(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		def := "name: ship\nqueue: wf\nsteps:\n  - {id: pack, kind: pack}\n  - {id: send, kind: send, needs: [pack]}\n"
		file := filepath.Join(t.TempDir(), "ship.yaml")
		if err := os.WriteFile(file, []byte(def), 0o644); err != nil {
			t.Fatal(err)
		}
		if out := e.ok("workflows", "apply", file); !strings.Contains(out, "registered ship version 1") {
			t.Errorf("apply: %s", out)
		}
		if r := e.run(def, "workflows", "apply", "-"); r.code != 0 || !strings.Contains(r.stdout, "unchanged") {
			t.Errorf("apply from stdin again: %d %s %s", r.code, r.stdout, r.stderr)
		}
		if out := e.ok("workflows", "list"); !strings.Contains(out, "ship") || !strings.Contains(out, "2") {
			t.Errorf("list: %s", out)
		}
		if out := e.ok("workflows", "show", "ship"); !strings.Contains(out, "send") || !strings.Contains(out, "pack") {
			t.Errorf("show: %s", out)
		}
		if out := strings.TrimSpace(e.ok("workflows", "run", "ship", "--run-id", "ship-1", "--input", `{"to":"x"}`)); out != "ship-1" {
			t.Errorf("run printed %q, want the run id", out)
		}
		e.fails(4, "ship-1", "workflows", "run", "ship", "--run-id", "ship-1")
		e.fails(3, "nope", "workflows", "run", "nope")
		e.fails(2, "--input", "workflows", "run", "ship", "--input", "{not json")
		e.fails(2, "run_id", "workflows", "run", "ship", "--run-id", "has.dot")
		e.fails(2, "--state", "runs", "list", "--state", "bogus")
		e.fails(2, "FILE", "workflows", "apply", filepath.Join(t.TempDir(), "missing.yaml"))
		e.fails(2, "mapping", "workflows", "apply", "-") // empty stdin is no definition
		var rs []map[string]any
		e.json(&rs, "runs", "list", "--workflow", "ship")
		if len(rs) != 1 || rs[0]["run_id"] != "ship-1" || rs[0]["state"] != "running" {
			t.Errorf("runs list: %v", rs)
		}
		var run struct {
			State string `json:"state"`
			Steps []struct {
				ID, State, TaskID string
			} `json:"steps"`
		}
		e.json(&run, "runs", "show", "ship-1")
		if run.State != "running" || len(run.Steps) != 2 || run.Steps[0].State != "pending" || run.Steps[1].State != "waiting" {
			t.Errorf("runs show: %+v", run)
		}
		if out := e.ok("runs", "show", "ship-1"); !strings.Contains(out, "STEP") || !strings.Contains(out, "waiting") {
			t.Errorf("runs show (text): %s", out)
		}
		if out := e.ok("runs", "cancel", "ship-1"); !strings.Contains(out, "canceled") {
			t.Errorf("cancel: %s", out)
		}
		e.fails(4, "canceled", "runs", "cancel", "ship-1")
	})
}
