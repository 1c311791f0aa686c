package backstop

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// TestRunWorkflowStartsTheLatestVersionAnyClientRegistered: a client
// starts the latest version of a workflow without reading it each time;
// a version another client (another process) registers is the one its
// next start runs, as is one it registers itself and a definition
// registered again; a start naming a version runs that one.
func TestRunWorkflowStartsTheLatestVersionAnyClientRegistered(t *testing.T) {
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		other, err := NewClient(c.store, nil)
		if err != nil {
			t.Fatal(err)
		}
		const one = "name: latest\nsteps:\n  - id: a\n    kind: k\n    queue: wf\n"
		const two = "name: latest\nsteps:\n  - id: b\n    kind: k\n    queue: wf\n"
		start := func(c *Client, version int, want WorkflowVersion) {
			t.Helper()
			r, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "latest", Version: version})
			if err != nil {
				t.Fatal(err)
			}
			if r.Version != want.Version || r.PlanHash != want.PlanHash {
				t.Fatalf("started version %d (%s); want %d (%s)", r.Version, r.PlanHash, want.Version, want.PlanHash)
			}
			run, err := c.WorkflowRun(ctx, r.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if run.Version != want.Version || run.PlanHash != want.PlanHash {
				t.Fatalf("run %s stored with version %d (%s); want %d (%s)", r.RunID, run.Version, run.PlanHash, want.Version, want.PlanHash)
			}
		}
		v1 := applyYAML(t, c, one)
		start(c, 0, v1)
		start(c, 0, v1)
		v2 := applyYAML(t, other, two)
		start(c, 0, v2)
		start(c, 0, v2)
		start(c, 1, v1)
		v3 := applyYAML(t, other, one) // registered again: the latest, as version 3
		start(c, 0, v3)
		v4 := applyYAML(t, c, two)
		start(c, 0, v4)
		start(other, 0, v4)
	})
}

// TestRunWorkflowWithRunIDStaleEveryTime: a start with a run id whose
// every attempt finds a newer version registered meanwhile (by another
// process) fails as a conflict that says so; it is not told its run
// exists, and no run of that id was written.
func TestRunWorkflowWithRunIDStaleEveryTime(t *testing.T) {
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		other, err := NewClient(c.store, nil)
		if err != nil {
			t.Fatal(err)
		}
		defs := []string{
			"name: stale\nsteps:\n  - id: a\n    kind: k\n    queue: wf\n",
			"name: stale\nsteps:\n  - id: b\n    kind: k\n    queue: wf\n",
		}
		applyYAML(t, c, defs[0])
		p := RunWorkflowParams{Workflow: "stale", RunID: "run-stale-1"}
		input, runID, err := c.startParams(p)
		if err != nil {
			t.Fatal(err)
		}
		// RunWorkflow's start of the latest version, with another
		// process registering a version between each plan and its write.
		plans := 0
		var eff engine.RunEffects
		_, _, err = c.e.StartLatest(ctx, p.Workflow, func(d *WorkflowVersion, def *workflow.Definition) (workflow.Plan, error) {
			plans++
			applyYAML(t, other, defs[plans%2])
			return c.planStart(def, d, runID, input)
		}, &eff)
		err = c.runConflict(p, err)
		if err == nil {
			t.Fatal("a start stale at every attempt succeeded")
		}
		if !errors.Is(err, ErrConflict) || !errors.Is(err, store.ErrStaleVersion) {
			t.Fatalf("error %v: want a conflict naming the stale version", err)
		}
		if strings.Contains(err.Error(), "already exists") {
			t.Fatalf("error %q says the run exists", err)
		}
		if plans < 2 {
			t.Fatalf("planned %d times; want a retry per stale version", plans)
		}
		if _, err := c.WorkflowRun(ctx, "run-stale-1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("WorkflowRun after the failed start: %v; want not found", err)
		}
		// The id is free: a start without a registrar beside it runs.
		if _, err := c.RunWorkflow(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := c.RunWorkflow(ctx, p); err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("second start of the same run id: %v; want already exists", err)
		}
	})
}
