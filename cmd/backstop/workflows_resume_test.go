package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// Bulk resume of workflows (issue 17 item 7): a hundred runs halted at one
// step by one outage resume with one command, `dlq redrive --workflow W
// --step S`, which selects their dead steps by attribute; runs of another
// workflow halted at a step of the same id are left alone; `runs resume`
// (the same redrive) then resumes them, one run and then the rest.

// outageYAML: push fails permanently while the upstream is down and halts
// the run; notify runs after it. %s is the workflow's name.
const outageYAML = `name: %s
queue: outage
steps:
  - id: push
    kind: push
    on_failure: halt
    retry: {max_attempts: 1}
  - id: notify
    kind: notify
    needs: [push]
`

// outageScript: push exits 65 (permanent) while $UP does not exist.
const outageScript = `cat > /dev/null
case "$BACKSTOP_KIND" in
push) [ -e "$UP" ] || { echo "upstream down" >&2; exit 65; } ;;
esac`

func TestWorkflowBulkResumeAfterOutage(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, dir := st.url(t), t.TempDir()
			up := filepath.Join(dir, "up")
			cliOK(t, "--db", db, "migrate")
			for _, name := range []string{"sync", "other"} {
				file := filepath.Join(dir, name+".yaml")
				if err := os.WriteFile(file, []byte(fmt.Sprintf(outageYAML, name)), 0o644); err != nil {
					t.Fatal(err)
				}
				cliOK(t, "--db", db, "workflows", "apply", file)
			}
			_, c := storeClient(t, db)
			const runs, others = 100, 3
			var syncIDs, otherIDs []string
			for i := range runs + others {
				wf := "sync"
				if i >= runs {
					wf = "other"
				}
				r, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: wf, Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
				if err != nil {
					t.Fatal(err)
				}
				if wf == "sync" {
					syncIDs = append(syncIDs, r.RunID)
				} else {
					otherIDs = append(otherIDs, r.RunID)
				}
			}
			cmd := exec.Command(binary, "--db", db, "work", "--queue", "outage", "--concurrency", "8",
				"--permanent-exit-codes", "65", "--", "sh", "-c", outageScript)
			cmd.Env = append(os.Environ(), "UP="+up)
			startProc(t, cmd, filepath.Join(dir, "worker.stderr"), "worker", 0)

			countRuns := func(wf string, state store.RunState) int {
				rs, err := c.WorkflowRuns(ctx, backstop.ListRunsParams{Workflow: wf, States: []store.RunState{state}, Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				return len(rs)
			}
			testwait.For(t, "every run halted at push", func() bool {
				return countRuns("sync", "failed") == runs && countRuns("other", "failed") == others
			})
			// The halted runs, as an operator finds them.
			var listed []store.RunRecord
			out := cliOK(t, "--db", db, "runs", "list", "--workflow", "sync", "--state", "failed", "--limit", "1000", "-o", "json")
			if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != runs {
				t.Fatalf("runs list --workflow sync --state failed: %d runs (%v), want %d", len(listed), err, runs)
			}

			// Bad input: exit 2 naming the problem, nothing replayed; the
			// same through a server (the checks made there).
			base := startServer(t, db)
			long := strings.Repeat("r", 1025)
			for _, bad := range []struct {
				args []string
				want string
			}{
				{[]string{"--workflow", "nope"}, `workflow "nope" is not registered`},
				{[]string{"--workflow", "bad name"}, `workflow: "bad name" must be`},
				{[]string{"--workflow", "sync", "--step", "nope"}, `no step "nope"`},
				{[]string{"--step", "a.b"}, `step: step id "a.b" must be`},
				{[]string{"--run", long}, "run_id: must be 1-1024 bytes"},
				{[]string{"--workflow", "sync", "--run", otherIDs[0]}, `is a run of workflow "other", not "sync"`},
				{[]string{"--run", syncIDs[0], "--step", "nope"}, `has no step "nope"`},
				{[]string{"--workflow", "sync", "--attr", "workflow=other"}, "contradicts"},
				{[]string{"--workflow", "sync", "--hold-key=false"}, "--hold-key=false: a replay on an ordered queue always holds"},
			} {
				for _, via := range [][]string{{"--db", db}, {"--server", base}} {
					args := append(append(via, "dlq", "redrive", "--yes"), bad.args...)
					out, errOut, code := wfCLI(t, nil, args...)
					if code != 2 || !strings.Contains(errOut, bad.want) {
						t.Errorf("%s dlq redrive %s: exit %d, stderr %q, want 2 naming %q (stdout %q)", via[0], strings.Join(bad.args, " "), code, errOut, bad.want, out)
					}
				}
			}
			if rs, err := c.Redrives(ctx, "", 100); err != nil || len(rs) != 0 {
				t.Fatalf("bad input left redrives: %+v %v", rs, err)
			}
			dead, err := c.DeadLetters(ctx, backstop.ListParams{Attrs: map[string]string{"step_id": "push"}, Limit: 1000})
			if err != nil || len(dead) != runs+others {
				t.Fatalf("open dead pushes after the bad input: %d %v, want %d", len(dead), err, runs+others)
			}

			// Looking before acting: the dead letters of a workflow, and a dry
			// run of two runs' selection (several runs: --where).
			var otherDead []json.RawMessage
			out = cliOK(t, "--db", db, "dlq", "list", "--workflow", "other", "--step", "push", "-o", "json")
			if err := json.Unmarshal([]byte(out), &otherDead); err != nil || len(otherDead) != others {
				t.Fatalf("dlq list --workflow other: %d (%v), want %d\n%s", len(otherDead), err, others, out)
			}
			out = cliOK(t, "--db", db, "dlq", "redrive", "--workflow", "sync", "--dry-run", "--sample", "0",
				"--where", fmt.Sprintf(`attributes.run_id in [%q, %q]`, syncIDs[0], syncIDs[1]))
			if !strings.Contains(out, "would redrive 2 dead letters") {
				t.Fatalf("dry run of two runs: %s", out)
			}
			out = cliOK(t, "--server", base, "dlq", "redrive", "--workflow", "sync", "--step", "push", "--dry-run")
			if !strings.Contains(out, fmt.Sprintf("would redrive %d dead letters", runs)) {
				t.Fatalf("dry run through the server: %s", out)
			}

			// The outage ends; one command resumes the hundred runs.
			if err := os.WriteFile(up, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			out = cliOK(t, "--db", db, "dlq", "redrive", "--workflow", "sync", "--step", "push", "--yes", "--why", "upstream back")
			if !strings.Contains(out, fmt.Sprintf("%d replayed, 0 failed", runs)) {
				t.Fatalf("redrive: %s", out)
			}
			testwait.For(t, "every sync run succeeded", func() bool { return countRuns("sync", "succeeded") == runs })
			for _, id := range syncIDs {
				tk, err := c.Get(ctx, id+".push")
				if err != nil {
					t.Fatal(err)
				}
				if tk.State != bt.StateSucceeded || tk.ReplayCount != 1 {
					t.Errorf("%s: %s, replayed %d times; want succeeded, replayed once under its own id", tk.ID, tk.State, tk.ReplayCount)
				}
			}
			if n := countRuns("other", "failed"); n != others {
				t.Errorf("%d runs of other are failed, want all %d left halted", n, others)
			}
			for _, id := range otherIDs {
				tk, err := c.Get(ctx, id+".push")
				if err != nil {
					t.Fatal(err)
				}
				if tk.State != bt.StateDead || tk.DLQStatus != bt.DLQOpen || tk.ReplayCount != 0 {
					t.Errorf("%s of workflow other: %s %s replayed %d, want an open dead letter never replayed", tk.ID, tk.State, tk.DLQStatus, tk.ReplayCount)
				}
			}

			// runs resume: the same redrive under the runs noun.
			if out, errOut, code := wfCLI(t, nil, "--db", db, "runs", "resume", "--yes"); code != 2 || !strings.Contains(errOut, "name a run") {
				t.Errorf("runs resume without a selection: exit %d %q %q, want 2", code, out, errOut)
			}
			if out, errOut, code := wfCLI(t, nil, "--db", db, "runs", "resume", otherIDs[0], "--workflow", "sync", "--yes"); code != 2 ||
				!strings.Contains(errOut, `not "sync"`) {
				t.Errorf("runs resume RUN_ID of another workflow: exit %d %q %q, want 2", code, out, errOut)
			}
			if out := cliOK(t, "--db", db, "runs", "resume", otherIDs[0], "--yes"); !strings.Contains(out, "1 replayed, 0 failed") {
				t.Fatalf("runs resume RUN_ID: %s", out)
			}
			if out := cliOK(t, "--db", db, "runs", "resume", "--workflow", "other", "--step", "push", "--yes"); !strings.Contains(out, fmt.Sprintf("%d replayed, 0 failed", others-1)) {
				t.Fatalf("runs resume --workflow other: %s", out)
			}
			testwait.For(t, "every other run succeeded", func() bool { return countRuns("other", "succeeded") == others })
		})
	}
}
