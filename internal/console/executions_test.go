package console_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/store"
)

// A task that ran 60 times: its page shows the newest 25 executions and
// says how many there are; "Show 25 older" puts the next older window on
// top, until all 60 are shown in attempt order and the button goes.
func TestBrowserTaskExecutionsPaged(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		bg := context.Background()
		r, err := e.lib.Enqueue(bg, backstop.EnqueueParams{Queue: "ex", Kind: "k", MaxAttempts: 1000})
		if err != nil {
			t.Fatal(err)
		}
		id := r.Task.ID
		for i := range 60 {
			now := e.clock.Now()
			got, err := e.store.Claim(bg, store.ClaimParams{Queue: "ex", WorkerID: "w", Max: 1, Now: now, Lease: time.Minute})
			if err != nil || len(got) != 1 {
				t.Fatalf("claim %d: %v %v", i, got, err)
			}
			if _, err := e.store.Settle(bg, []store.Settlement{{TaskID: id, ExecutionID: got[0].ExecutionID,
				Outcome: backstop.OutcomeTransientError, Error: "boom", FinishedAt: now, State: backstop.StatePending, RunAt: now}}); err != nil {
				t.Fatal(err)
			}
		}
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "the task page", nav(e.url+"/#/tasks/"+id), visible("#executions table"))
		rows := func() int { return count(t, ctx, "#executions tbody tr") }
		firstAttempt := func() string {
			return evalJS[string](t, ctx, "first attempt", `document.querySelector("#executions tbody tr td").textContent`)
		}
		if n := rows(); n != 25 {
			t.Fatalf("%d executions shown, want the newest 25", n)
		}
		waitText(t, ctx, "#executions-count", "The newest 25 of 60 executions.")
		if a := firstAttempt(); a != "36" {
			t.Fatalf("first row: attempt %s, want 36", a)
		}
		for _, want := range []int{50, 60} {
			run(t, ctx, "show older", click("#executions-older"))
			run(t, ctx, fmt.Sprintf("%d rows", want), poll(fmt.Sprintf(`document.querySelectorAll("#executions tbody tr").length === %d`, want)))
		}
		waitText(t, ctx, "#executions-count", "60 executions.")
		if a := firstAttempt(); a != "1" {
			t.Fatalf("first row after paging: attempt %s, want 1", a)
		}
		if hidden := evalJS[bool](t, ctx, "button hidden", `document.querySelector("#executions-older").hidden`); !hidden {
			t.Fatal("the older button stays when nothing older is left")
		}
	})
}
