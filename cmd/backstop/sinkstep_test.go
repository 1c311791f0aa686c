package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A step's sink fields are checked by `workflows apply`: a bad sink name
// or policy is refused, each with exit 2 naming the field and nothing
// written; halt (the default), continue and dead_letter are registered.
func TestWorkflowApplySinkStep(t *testing.T) {
	t.Parallel()
	db, dir := stores[0].url(t), t.TempDir()
	cliOK(t, "--db", db, "migrate")
	step := "name: s\nsteps:\n  - id: a\n    kind: k\n"
	for name, c := range map[string]struct{ extra, want string }{
		"policy": {"    sink: bus\n    on_sink_fail: retry\n", `on_sink_fail: "retry" must be`},
		"name":   {"    sink: 'b u s'\n    on_sink_fail: continue\n", `sink: "b u s" must be`},
		"topic":  {"    sink_topic: t\n", `sink_topic: only a step with a sink`},
	} {
		file := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(file, []byte(step+c.extra), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := wfCLI(t, nil, "--db", db, "workflows", "apply", file)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q, want 2 and %q (stdout %q)", name, code, errOut, c.want, out)
		}
	}
	if out := cliOK(t, "--db", db, "workflows", "list", "-o", "json"); compactJSON(out) != "[]" {
		t.Errorf("refused definitions were written: %s", out)
	}
	for i, extra := range []string{"    sink: bus\n    on_sink_fail: continue\n", "    sink: bus\n", "    sink: bus\n    on_sink_fail: dead_letter\n"} {
		file := filepath.Join(dir, fmt.Sprintf("ok%d.yaml", i))
		if err := os.WriteFile(file, []byte(step+extra), 0o644); err != nil {
			t.Fatal(err)
		}
		cliOK(t, "--db", db, "workflows", "apply", file)
	}
}
