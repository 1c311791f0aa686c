package cli

import (
	"strings"
	"testing"
)

// runs complete-step on both stores and over --server: a stuck step is
// forced and the run goes on; bad input exits 2, an unknown run, step or
// item 3, a step that cannot be forced 4, each naming the problem and
// writing nothing.
func TestRunsCompleteStep(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		def := "name: ship\nqueue: wf\nsteps:\n  - {id: pack, kind: pack}\n  - {id: send, kind: send, needs: [pack]}\n  - {id: bill, kind: bill, needs: [send]}\n"
		if r := e.run(def, "workflows", "apply", "-"); r.code != 0 {
			t.Fatalf("apply: %d %s", r.code, r.stderr)
		}
		e.ok("workflows", "run", "ship", "--run-id", "ship-1")
		states := func() string {
			var run struct {
				State string `json:"state"`
				Steps []struct{ ID, State string }
			}
			e.json(&run, "runs", "show", "ship-1")
			var b strings.Builder
			b.WriteString(run.State)
			for _, s := range run.Steps {
				b.WriteString(" " + s.ID + "=" + s.State)
			}
			return b.String()
		}
		before := states()
		if before != "running pack=pending send=waiting bill=waiting" {
			t.Fatalf("before: %s", before)
		}
		e.fails(2, "--reason", "runs", "complete-step", "ship-1", "pack")
		e.fails(2, "--reason", "runs", "complete-step", "ship-1", "pack", "--reason", " ")
		e.fails(2, "--result", "runs", "complete-step", "ship-1", "pack", "--reason", "x", "--result", "{not json")
		e.fails(2, "--item", "runs", "complete-step", "ship-1", "pack", "--reason", "x", "--item", "-1")
		e.fails(2, "accepts 2 arg", "runs", "complete-step", "ship-1", "--reason", "x")
		e.fails(3, "nope", "runs", "complete-step", "nope", "pack", "--reason", "x")
		e.fails(3, "no step", "runs", "complete-step", "ship-1", "nope", "--reason", "x")
		e.fails(3, "not started", "runs", "complete-step", "ship-1", "send", "--reason", "x")
		e.fails(3, "no item 2", "runs", "complete-step", "ship-1", "pack", "--reason", "x", "--item", "2")
		if got := states(); got != before {
			t.Fatalf("a refused complete-step wrote: %s", got)
		}
		if out := e.ok("runs", "complete-step", "ship-1", "pack", "--reason", "packed by hand", "--result", `{"box":3}`); !strings.Contains(out, "run running") {
			t.Errorf("complete-step: %s", out)
		}
		if got := states(); got != "running pack=succeeded send=pending bill=waiting" {
			t.Errorf("after: %s", got)
		}
		e.fails(4, "succeeded already", "runs", "complete-step", "ship-1", "pack", "--reason", "x")
		if out := e.ok("audit", "list", "--type", "step.force_completed"); !strings.Contains(out, "packed by hand") {
			t.Errorf("audit list: %s", out)
		}

		// Over --server (an admin token): the same checks and codes.
		r := newRemoteEnv(t, e, "admin")
		for _, c := range []struct {
			code int
			want string
			args []string
		}{
			{2, "--reason", []string{"runs", "complete-step", "ship-1", "send"}},
			{2, "--result", []string{"runs", "complete-step", "ship-1", "send", "--reason", "x", "--result", "[1,"}},
			{3, "nope", []string{"runs", "complete-step", "nope", "send", "--reason", "x"}},
			{3, "no step", []string{"runs", "complete-step", "ship-1", "nope", "--reason", "x"}},
			{4, "succeeded already", []string{"runs", "complete-step", "ship-1", "pack", "--reason", "x"}},
		} {
			if got := r.remote("", c.args...); got.code != c.code || !strings.Contains(got.stderr, c.want) {
				t.Errorf("--server %s: exit %d %q, want %d naming %q", strings.Join(c.args, " "), got.code, got.stderr, c.code, c.want)
			}
		}
		if got := r.remote("", "runs", "complete-step", "ship-1", "send", "--reason", "sent by hand"); got.code != 0 || !strings.Contains(got.stdout, "run running") {
			t.Fatalf("--server complete-step: %d %s %s", got.code, got.stdout, got.stderr)
		}
		if got := states(); got != "running pack=succeeded send=succeeded bill=pending" {
			t.Errorf("after --server: %s", got)
		}
	})
}
