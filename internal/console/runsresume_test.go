package console_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// The Runs page filtered to a workflow's halted runs offers an admin to
// resume them all: one redrive of the workflow's dead steps (issue 17 item
// 7). Another workflow's halted runs are left alone; a viewer is not
// offered the action.
func TestBrowserResumeHaltedRuns(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		ctx := context.Background()
		for _, name := range []string{"sync", "other"} {
			def, err := workflow.Parse([]byte("name: " + name + "\nqueue: outage\nsteps:\n  - {id: push, kind: push}\n"))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.lib.ApplyWorkflow(ctx, def); err != nil {
				t.Fatal(err)
			}
		}
		var syncRuns, otherRuns []string
		for i := range 4 {
			wf := "sync"
			if i == 3 {
				wf = "other"
			}
			r, err := e.lib.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: wf})
			if err != nil {
				t.Fatal(err)
			}
			if wf == "sync" {
				syncRuns = append(syncRuns, r.RunID)
			} else {
				otherRuns = append(otherRuns, r.RunID)
			}
		}
		// The outage: every push fails for good; the runs halt.
		halted := func(wf string) int {
			rs, err := e.lib.WorkflowRuns(ctx, backstop.ListRunsParams{Workflow: wf, States: []store.RunState{workflow.RunFailed}})
			if err != nil {
				t.Fatal(err)
			}
			return len(rs)
		}
		for deadline := time.Now().Add(30 * time.Second); halted("sync") != 3 || halted("other") != 1; {
			if time.Now().After(deadline) {
				t.Fatalf("the runs did not halt: sync %d, other %d", halted("sync"), halted("other"))
			}
			st, out, _ := e.call(t, "POST", "/v1/claim", api.RoleOperator, map[string]any{"queues": []string{"outage"}, "worker_id": "console-test", "max": 10}, nil)
			if st != http.StatusOK {
				t.Fatalf("claim: %d %v", st, out)
			}
			tasks, _ := out["tasks"].([]any)
			for _, x := range tasks {
				ct := x.(map[string]any)
				if st, out, _ := e.call(t, "POST", "/v1/tasks/"+ct["id"].(string)+"/fail", api.RoleOperator,
					map[string]any{"lease_token": ct["lease_token"], "outcome": "permanent_error", "error": "upstream down"}, nil); st != http.StatusOK {
					t.Fatalf("fail: %d %v", st, out)
				}
			}
		}

		ctxB := browser(t)
		e.signIn(t, ctxB, api.RoleViewer)
		run(t, ctxB, "viewer: halted runs of sync", nav(e.url+"/#/runs?workflow=sync&state=failed"),
			poll(`document.querySelectorAll("#runs-list tbody tr").length === 3`))
		if n := count(t, ctxB, "#runs-resume"); n != 0 {
			t.Fatal("a viewer is offered to resume runs")
		}

		ctxA := browser(t)
		e.signIn(t, ctxA, api.RoleAdmin)
		run(t, ctxA, "open Runs", click(`#nav a[data-page="runs"]`), visible("#runs-filter"))
		run(t, ctxA, "filter: halted runs of sync", keys("#runs-f-workflow", "sync"),
			chromedp.SetValue(chromedp.CSS("#runs-f-state"), "failed"), submit("#runs-filter"), visible("#runs-resume-start"))
		if b := text(t, ctxA, "#runs-resume-start"); b != "Resume 3 halted runs of sync" {
			t.Fatalf("resume button: %q", b)
		}
		if n := evalJS[string](t, ctxA, "dead steps", `document.querySelector("#runs-resume").dataset.steps`); n != "3" {
			t.Fatalf("the dry run counts %s dead steps, want 3", n)
		}
		screenshot(t, ctxA, "runs-resume")
		run(t, ctxA, "resume them", keys("#runs-resume-why", "upstream back"), click("#runs-resume-start"),
			poll(`document.querySelector("#runs-resume") && document.querySelector("#runs-resume").dataset.status === "done"`))
		waitText(t, ctxA, "#runs-resume-text", "3 of 3 dead steps replayed")
		for _, id := range syncRuns {
			if tk := e.task(t, id+".push"); tk.State != backstop.StatePending || tk.ReplayCount != 1 {
				t.Errorf("%s: %s replayed %d, want pending, replayed once", tk.ID, tk.State, tk.ReplayCount)
			}
		}
		if tk := e.task(t, otherRuns[0]+".push"); tk.State != backstop.StateDead || tk.ReplayCount != 0 {
			t.Errorf("other's step: %s replayed %d, want left dead", tk.State, tk.ReplayCount)
		}
		evs, err := e.lib.Events(ctx, syncRuns[0]+".push")
		if err != nil {
			t.Fatal(err)
		}
		why := false
		for _, ev := range evs {
			why = why || ev.Type == "dlq.replayed" && contains(string(ev.Body), "upstream back")
		}
		if !why {
			t.Errorf("the replay's history lacks the reason: %+v", evs)
		}
		assertNothingRan(t, ctxA, "runs resume")
	})
}
