package backstop

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// A StepSelection is checked against the registry: a step of an older
// version is a step (runs keep their version); a run names its own
// version's steps; a typo is ErrInvalid naming the field; a selection
// contradicting the filter's attributes is refused; Apply adds the
// attributes to a copy of the filter's.
func TestStepSelection(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, "name: flow\nqueue: q\nsteps:\n  - {id: old, kind: k}\n")
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "flow", RunID: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		if v := applyYAML(t, c, "name: flow\nqueue: q\nsteps:\n  - {id: new, kind: k}\n"); v.Version != 2 {
			t.Fatalf("second version: %d", v.Version)
		}
		applyYAML(t, c, "name: other\nqueue: q\nsteps:\n  - {id: new, kind: k}\n")
		for _, ok := range []StepSelection{
			{}, {Workflow: "flow"}, {Workflow: "flow", Step: "old"}, {Workflow: "flow", Step: "new"},
			{RunID: run.RunID, Step: "old"}, {Workflow: "flow", RunID: "r1", Step: "old"},
			{RunID: "a-batch-of-tasks"}, {RunID: "a-batch-of-tasks", Step: "anything"}, {Step: "anything"},
		} {
			if err := c.CheckStepSelection(ctx, ok); err != nil {
				t.Errorf("%+v: %v", ok, err)
			}
		}
		for _, bad := range []struct {
			sel   StepSelection
			field string
		}{
			{StepSelection{Workflow: "nope"}, "workflow"},
			{StepSelection{Workflow: "bad name"}, "workflow"},
			{StepSelection{Workflow: "flow", Step: "nope"}, "step"},
			{StepSelection{Step: "a.b"}, "step"},
			{StepSelection{RunID: strings.Repeat("r", 1025)}, "run_id"},
			{StepSelection{RunID: "r1", Step: "new"}, "step"}, // r1 runs version 1
			{StepSelection{Workflow: "other", RunID: "r1"}, "run_id"},
			{StepSelection{Workflow: "flow", RunID: "a-batch-of-tasks"}, "run_id"},
		} {
			err := c.CheckStepSelection(ctx, bad.sel)
			var ve *ValidationError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Field != bad.field {
				t.Errorf("%+v: %v, want ErrInvalid naming %s", bad.sel, err, bad.field)
			}
		}

		f := ListParams{Queue: "q", Attrs: map[string]string{"tenant": "acme"}}
		got, err := StepSelection{Workflow: "flow", RunID: "r1", Step: "old"}.Apply(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Attrs) != 4 || got.Attrs["workflow"] != "flow" || got.Attrs["run_id"] != "r1" || got.Attrs["step_id"] != "old" ||
			got.Attrs["tenant"] != "acme" || len(f.Attrs) != 1 {
			t.Errorf("Apply: %v (the filter's own: %v)", got.Attrs, f.Attrs)
		}
		if _, err := (StepSelection{Workflow: "flow"}).Apply(ListParams{Attrs: map[string]string{"workflow": "other"}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("a contradicting attribute: %v, want ErrInvalid", err)
		}
		if _, err := (StepSelection{Workflow: "flow"}).Apply(ListParams{Attrs: map[string]string{"workflow": "flow"}}); err != nil {
			t.Errorf("the same attribute: %v", err)
		}
		// A redrive with a bad selection writes nothing.
		if _, err := c.Redrive(ctx, RedriveParams{Steps: StepSelection{Workflow: "flow", Step: "nope"}}, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("redrive with an unknown step: %v", err)
		}
		if rs, err := c.Redrives(ctx, "", 10); err != nil || len(rs) != 0 {
			t.Errorf("redrives after the bad selection: %+v %v", rs, err)
		}
	})
}
