package backstop

import (
	"context"
	"testing"
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
