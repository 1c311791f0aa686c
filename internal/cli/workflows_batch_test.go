package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `workflows run --batch-file` on both stores, on the database and over a
// server: every run of the file started, one run id per line in the
// file's order (-o json: the runs); a bad line anywhere in the file, a run
// id twice, a workflow not registered or a run id that exists writes
// nothing and names the line, with the exit code of the single run's
// problem.
func TestWorkflowRunBatchFile(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		def := "name: ship\nqueue: wf\nsteps:\n  - {id: pack, kind: pack}\n  - {id: send, kind: send, needs: [pack]}\n"
		e.run(def, "workflows", "apply", "-")
		r := newRemoteEnv(t, e, "operator")
		dir := t.TempDir()
		write := func(name string, lines ...string) string {
			t.Helper()
			f := filepath.Join(dir, name)
			if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return f
		}
		for _, side := range []string{"db", "server"} {
			run := func(args ...string) cliResult {
				if side == "server" {
					return r.remote("", args...)
				}
				return e.run("", args...)
			}
			// 1,200 runs: two batches; "workflow" defaults to NAME.
			var lines []string
			for i := range 1200 {
				switch {
				case i == 5:
					lines = append(lines, "")
				case i%2 == 0:
					lines = append(lines, fmt.Sprintf(`{"workflow":"ship","run_id":"%s-%d","input":{"n":%d}}`, side, i, i))
				default:
					lines = append(lines, fmt.Sprintf(`{"run_id":"%s-%d","version":1}`, side, i))
				}
			}
			out := run("workflows", "run", "ship", "--batch-file", write(side+".ndjson", lines...))
			if out.code != 0 {
				t.Fatalf("%s: exit %d: %s", side, out.code, out.stderr)
			}
			ids := strings.Fields(out.stdout)
			if len(ids) != 1199 || ids[0] != side+"-0" || ids[5] != side+"-6" || ids[1198] != side+"-1199" {
				t.Fatalf("%s: printed %d ids (%v …); want 1199 in the file's order", side, len(ids), ids[:min(len(ids), 6)])
			}
			var shown map[string]any
			e.json(&shown, "runs", "show", side+"-1199")
			if shown["state"] != "running" || shown["workflow"] != "ship" {
				t.Fatalf("%s: run 1199: %v", side, shown)
			}
			// -o json: the runs started.
			js := run("-o", "json", "workflows", "run", "--batch-file", write(side+"-j.ndjson", `{"workflow":"ship","run_id":"`+side+`-json"}`))
			if js.code != 0 || !strings.Contains(js.stdout, `"run_id": "`+side+`-json"`) || !strings.Contains(js.stdout, `"plan_hash"`) {
				t.Fatalf("%s: -o json: %d %s %s", side, js.code, js.stdout, js.stderr)
			}
			// Nothing of a refused file is written: the bad record is in
			// its second thousand.
			bad := func(code int, want string, last string) {
				t.Helper()
				var ls []string
				for i := range 1001 {
					ls = append(ls, fmt.Sprintf(`{"workflow":"ship","run_id":"%s-bad-%d"}`, side, i))
				}
				ls = append(ls, last)
				res := run("workflows", "run", "--batch-file", write(side+"-bad.ndjson", ls...))
				if res.code != code || !strings.Contains(res.stderr, want) {
					t.Fatalf("%s: %s: exit %d %q; want %d naming %q", side, last, res.code, res.stderr, code, want)
				}
				e.fails(3, "", "runs", "show", side+"-bad-0")
			}
			bad(2, "line 1002: input", `{"workflow":"ship","input":{"a":"\u0000"}}`)
			bad(2, "line 1002: unknown key", `{"workflow":"ship","queue":"x"}`)
			bad(2, "line 1002: run_id", `{"workflow":"ship","run_id":"has.dot"}`)
			bad(2, `line 1002: run_id: "`+side+`-bad-3" is also on line 4`, `{"workflow":"ship","run_id":"`+side+`-bad-3"}`)
			bad(3, "line 1002", `{"workflow":"nope"}`)
			bad(3, "line 1002", `{"workflow":"ship","version":7}`)
			bad(2, "line 1002: workflow", `{"run_id":"no-workflow"}`)
			// A run id that exists: the first batch's conflict, nothing
			// written.
			res := run("workflows", "run", "--batch-file", write(side+"-taken.ndjson",
				`{"workflow":"ship","run_id":"`+side+`-fresh"}`, `{"workflow":"ship","run_id":"`+side+`-0"}`))
			if res.code != 4 || !strings.Contains(res.stderr, "line 2") || !strings.Contains(res.stderr, side+`-0" already exists`) {
				t.Fatalf("%s: a taken run id: exit %d %q", side, res.code, res.stderr)
			}
			e.fails(3, "", "runs", "show", side+"-fresh")
		}
		e.fails(2, "--input cannot be combined with --batch-file", "workflows", "run", "--batch-file", "x", "--input", "{}")
		e.fails(2, "", "workflows", "run")
	})
}
