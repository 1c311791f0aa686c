package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
)

// Workflows through the real binary: definitions applied and runs started
// with the CLI, steps run by `backstop work` exec workers (one shell script
// for every kind, dispatching on BACKSTOP_KIND).

// cli runs the binary and returns stdout, stderr and the exit code.
func wfCLI(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("backstop %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

func cliOK(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := wfCLI(t, nil, args...)
	if code != 0 {
		t.Fatalf("backstop %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// runView is what `runs show -o json` prints (the fields the tests read).
type runView struct {
	State string `json:"state"`
	Steps []struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		TaskID   string `json:"task_id"`
		Attempts int    `json:"attempts"`
		Items    []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	} `json:"steps"`
}

func showRun(t *testing.T, db, runID string) runView {
	t.Helper()
	var v runView
	out := cliOK(t, "--db", db, "runs", "show", runID, "-o", "json")
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("runs show: %v\n%s", err, out)
	}
	return v
}

func waitRunState(t *testing.T, db, runID string, want ...string) runView {
	t.Helper()
	var v runView
	testwait.For(t, fmt.Sprintf("run %s to be one of %v", runID, want), func() bool {
		v = showRun(t, db, runID)
		return slices.Contains(want, v.State)
	})
	return v
}

func (v runView) step(id string) (state, taskID string) {
	for _, s := range v.Steps {
		if s.ID == id {
			return s.State, s.TaskID
		}
	}
	return "", ""
}

const cliSagaYAML = `name: order
queue: wf
rollback: %s
steps:
  - id: reserve
    kind: reserve_slot
    compensate: undo_reserve
  - id: charge
    kind: charge_card
    needs: [reserve]
    compensate: refund_card
    on_failure: halt
    retry: {max_attempts: 3, schedule: [100ms]}
  - id: notify
    kind: send_receipt
    needs: [charge]
  - id: undo_reserve
    kind: release_slot
    compensation: true
  - id: refund_card
    kind: refund
    compensation: true
`

// sagaScript: each kind leaves a mark in $MARKS; reserve's result is
// {"slot":7}; charge fails with 65 (permanent) unless the payload's input
// says card "good"; release keeps the payload it got.
const sagaScript = `payload=$(cat); touch "$MARKS/$BACKSTOP_KIND"
case "$BACKSTOP_KIND" in
reserve_slot) echo '{"slot":7}' > "$BACKSTOP_RESULT_FILE" ;;
charge_card) case "$payload" in *'"card":"good"'*) echo '"charged"' > "$BACKSTOP_RESULT_FILE" ;; *) echo declined >&2; exit 65 ;; esac ;;
release_slot) printf '%s' "$payload" > "$MARKS/release_payload" ;;
esac`

func startStepWorker(t *testing.T, db, dir, name string, extra ...string) *worker {
	t.Helper()
	args := append([]string{"--db", db, "work", "--queue", "wf", "--concurrency", "4", "--permanent-exit-codes", "65"}, extra...)
	args = append(args, "--", "sh", "-c", sagaScript)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "MARKS="+dir)
	return startProc(t, cmd, filepath.Join(dir, name+".stderr"), name, 0)
}

func marked(dir, kind string) bool {
	_, err := os.Stat(filepath.Join(dir, kind))
	return err == nil
}

// startSaga applies the saga with its rollback on db (through the CLI),
// starts a run whose card is declined, and a worker for its steps.
func startSaga(t *testing.T, db, rollback string) (_, dir, runID string) {
	t.Helper()
	dir = t.TempDir()
	cliOK(t, "--db", db, "migrate")
	file := filepath.Join(dir, "order.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(cliSagaYAML, rollback)), 0o644); err != nil {
		t.Fatal(err)
	}
	cliOK(t, "--db", db, "workflows", "apply", file)
	runID = strings.TrimSpace(cliOK(t, "--db", db, "workflows", "run", "order", "--input", `{"card":"bad"}`))
	startStepWorker(t, db, dir, "worker")
	return db, dir, runID
}

func TestWorkflowSagaThroughCLI(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db, dir, runID := startSaga(t, st.url(t), "on_fail")
			v := waitRunState(t, db, runID, "compensated", "compensation_failed", "failed")
			if v.State != "compensated" {
				t.Fatalf("run ended %s, want compensated: %+v", v.State, v)
			}
			if !marked(dir, "release_slot") {
				t.Error("undo_reserve did not run")
			}
			if marked(dir, "refund") || marked(dir, "send_receipt") {
				t.Error("refund_card or notify ran; charge never completed")
			}
			b, _ := os.ReadFile(filepath.Join(dir, "release_payload"))
			var env struct {
				Compensating struct {
					Step   string          `json:"step"`
					Result json.RawMessage `json:"result"`
				} `json:"compensating"`
			}
			if err := json.Unmarshal(b, &env); err != nil || env.Compensating.Step != "reserve" ||
				compactJSON(string(env.Compensating.Result)) != `{"slot":7}` {
				t.Errorf("undo_reserve's payload %s: want compensating reserve with its result {\"slot\":7}", b)
			}
			if s, _ := v.step("charge"); s != "failed" {
				t.Errorf("charge is %s, want failed", s)
			}
		})
	}
}

func TestWorkflowHaltedRunResumedThroughCLI(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db, dir, runID := startSaga(t, st.url(t), "manual")
			v := waitRunState(t, db, runID, "failed")
			_, charge := v.step("charge")
			if charge == "" {
				t.Fatalf("no charge task: %+v", v)
			}
			cliOK(t, "--db", db, "dlq", "replay", charge, "--patch", "input.card=good")
			v = waitRunState(t, db, runID, "succeeded")
			if s, id := v.step("charge"); s != "succeeded" || id != charge {
				t.Errorf("charge: %s %s, want succeeded under the same id %s", s, id, charge)
			}
			if !marked(dir, "send_receipt") {
				t.Error("notify did not run after the replay")
			}
			out := cliOK(t, "--db", db, "tasks", "show", charge, "-o", "json")
			if !strings.Contains(out, "dlq.replayed") {
				t.Errorf("charge's history does not show the replay:\n%s", out)
			}
		})
	}
}

func TestWorkflowApplyRefusesBadDefinitions(t *testing.T) {
	t.Parallel()
	db, dir := stores[0].url(t), t.TempDir()
	cliOK(t, "--db", db, "migrate")
	for name, src := range map[string]string{
		"cycle":   "name: c\nsteps:\n  - {id: a, kind: k, needs: [b]}\n  - {id: b, kind: k, needs: [a]}\n",
		"needs":   "name: n\nsteps:\n  - {id: a, kind: k, needs: [nope]}\n",
		"dup":     "name: d\nsteps:\n  - {id: a, kind: k}\n  - {id: a, kind: k}\n",
		"compens": "name: p\nsteps:\n  - {id: a, kind: k, compensate: undo}\n",
	} {
		file := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := wfCLI(t, nil, "--db", db, "workflows", "apply", file)
		if code != 2 || !strings.Contains(errOut, "step") {
			t.Errorf("%s: exit %d, stderr %q, want 2 naming the step (stdout %q)", name, code, errOut, out)
		}
	}
	if out := cliOK(t, "--db", db, "workflows", "list", "-o", "json"); compactJSON(out) != "[]" {
		t.Errorf("bad definitions were written: %s", out)
	}
}

const crashYAML = `name: pipeline
queue: wf
steps:
  - id: prepare
    kind: step
  - id: fan
    kind: step
    needs: [prepare]
    for_each: input.items
  - id: merge
    kind: step
    needs: [fan]
  - id: check
    kind: step
    needs: [merge]
  - id: finish
    kind: step
    needs: [check]
`

// crashStepScript sleeps a little, logs "task_id execution_id" when done.
const crashStepScript = `cat > /dev/null; sleep 0.05; echo "$BACKSTOP_TASK_ID $BACKSTOP_EXECUTION_ID" >> "$RUN_LOG"`

// TestWorkflowCrash: 200 runs of a 5-step workflow with a 3-item fan-out
// while one of two workers is SIGKILLed every second. Every run ends
// succeeded; no step succeeded twice except after a lease expiry; no step
// started before every step it needs had succeeded.
func TestWorkflowCrash(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db, dir := st.url(t), t.TempDir()
			runLog := filepath.Join(dir, "runs.log")
			cliOK(t, "--db", db, "migrate")
			file := filepath.Join(dir, "pipeline.yaml")
			if err := os.WriteFile(file, []byte(crashYAML), 0o644); err != nil {
				t.Fatal(err)
			}
			cliOK(t, "--db", db, "workflows", "apply", file)
			ctx := context.Background()
			_, c := storeClient(t, db)
			const runs = 200
			ids := make([]string, runs)
			for i := range ids {
				r, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "pipeline",
					Input: json.RawMessage(fmt.Sprintf(`{"n":%d,"items":[1,2,3]}`, i))})
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = r.RunID
			}
			start := func(name string) *worker {
				cmd := exec.Command(binary, "--db", db, "work", "--queue", "wf", "--concurrency", "4",
					"--lease", "2s", "--leader-ttl", "2s", "--", "sh", "-c", crashStepScript)
				cmd.Env = append(os.Environ(), "RUN_LOG="+runLog)
				return startProc(t, cmd, filepath.Join(dir, name+".stderr"), name, 0)
			}
			start("steady")
			done := func() bool {
				rs, err := c.WorkflowRuns(ctx, backstop.ListRunsParams{Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rs {
					if r.State != "succeeded" {
						return false
					}
				}
				return len(rs) == runs
			}
			kills := 0
			for n := 0; !done(); n++ {
				w := start(fmt.Sprintf("victim-%d", n))
				// Wall time, not a signal: the victim must claim, run, settle
				// and advance runs for a while so that the kill lands at an
				// arbitrary point of that work (a settle, an advance, a
				// claim), not only while a step runs.
				time.Sleep(time.Second)
				_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
				<-w.done
				kills++
				if n > 600 {
					t.Fatal("the runs did not finish within 600 kills")
				}
			}

			// Invariants, from the store's records and the programs' log.
			logged, _ := os.ReadFile(runLog)
			completions := map[string]int{}
			for _, line := range strings.Split(strings.TrimSpace(string(logged)), "\n") {
				if f := strings.Fields(line); len(f) == 2 {
					completions[f[0]]++
				}
			}
			expiries := 0
			for _, id := range ids {
				r, err := c.WorkflowRun(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				finished := map[string]time.Time{} // step -> its last item's success
				started := map[string]time.Time{}  // step -> its first attempt's start
				for _, step := range r.Steps {
					tasks := []string{step.TaskID}
					if len(step.Items) > 0 {
						tasks = tasks[:0]
						for _, it := range step.Items {
							tasks = append(tasks, it.TaskID)
						}
					}
					for _, tid := range tasks {
						tk, err := c.Get(ctx, tid)
						if err != nil {
							t.Fatal(err)
						}
						succeeded, expired := 0, 0
						for _, e := range tk.Executions {
							if st, ok := started[step.ID]; !ok || e.StartedAt.Before(st) {
								started[step.ID] = e.StartedAt
							}
							switch e.Outcome {
							case bt.OutcomeSucceeded:
								succeeded++
								if e.FinishedAt != nil && e.FinishedAt.After(finished[step.ID]) {
									finished[step.ID] = *e.FinishedAt
								}
							case bt.OutcomeLeaseExpired:
								expired++
							}
						}
						expiries += expired
						if succeeded != 1 {
							t.Errorf("run %s step %s task %s: %d succeeded executions", id, step.ID, tid, succeeded)
						}
						if completions[tid] > 1+expired {
							t.Errorf("task %s ran to completion %d times with %d lease expiries", tid, completions[tid], expired)
						}
					}
				}
				for _, step := range r.Steps {
					if len(step.Needs) > 0 && started[step.ID].IsZero() {
						t.Errorf("run %s: step %s never started", id, step.ID)
					}
					for _, need := range step.Needs {
						if started[step.ID].Before(finished[need]) {
							t.Errorf("run %s: %s started at %s before %s succeeded at %s", id, step.ID,
								started[step.ID], need, finished[need])
						}
					}
				}
			}
			t.Logf("%d runs succeeded; %d workers SIGKILLed; %d attempts lost with them (lease expired)", runs, kills, expiries)
			if expiries == 0 {
				t.Error("no attempt was lost to a SIGKILL: the test did not exercise a crash")
			}
		})
	}
}
