package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// Run summarises the tasks whose run_id attribute is RunID.
type Run struct {
	RunID string `json:"run_id"`
	Total int    `json:"total"`
	// Counts holds every state, zero included.
	Counts map[State]int `json:"counts"`
	// Progress sums the tasks' reported steps.
	Progress Progress `json:"progress"`
	// DeadLetters counts the run's open dead letters (dead, not yet
	// replayed, discarded or resolved).
	DeadLetters int `json:"dead_letters"`
	// FirstActivity is the earliest enqueue, LastActivity the latest
	// change of any of the run's tasks.
	FirstActivity time.Time `json:"first_activity"`
	LastActivity  time.Time `json:"last_activity"`
	// Finished: no task of the run is live (waiting or running).
	Finished bool `json:"finished"`

	// A workflow run (docs/workflows.md) also has its workflow, its state
	// (Finished then says whether the run is over), its input and every
	// step of its definition.
	Workflow string          `json:"workflow,omitempty"`
	Version  int             `json:"version,omitempty"`
	PlanHash string          `json:"plan_hash,omitempty"`
	State    store.RunState  `json:"state,omitempty"`
	Error    string          `json:"error,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	Steps    []RunStep       `json:"steps,omitempty"`
}

func validRunID(id string) error {
	if id == "" || len(id) > 1024 {
		return invalid("run_id", "must be 1-1024 bytes")
	}
	return nil
}

// Run reads the summary of a run: every task with attribute run_id =
// runID. A run without tasks is ErrNotFound.
func (c *Client) Run(ctx context.Context, runID string) (*Run, error) {
	if err := validRunID(runID); err != nil {
		return nil, err
	}
	out := &Run{RunID: runID, Counts: make(map[State]int, len(bt.States)), Finished: true}
	for _, s := range bt.States {
		out.Counts[s] = 0
	}
	attempts := map[string]int{} // for a workflow run's steps
	err := c.eachRunTask(ctx, runID, func(t *Task) {
		attempts[t.ID] = t.Attempt
		out.Total++
		out.Counts[t.State]++
		out.Progress.Total += t.Progress.Total
		out.Progress.Completed += t.Progress.Completed
		if t.State == StateDead && t.DLQStatus == DLQOpen {
			out.DeadLetters++
		}
		if t.State.Live() {
			out.Finished = false
		}
		if out.FirstActivity.IsZero() || t.CreatedAt.Before(out.FirstActivity) {
			out.FirstActivity = t.CreatedAt
		}
		if t.UpdatedAt.After(out.LastActivity) {
			out.LastActivity = t.UpdatedAt
		}
	})
	if err != nil {
		return nil, err
	}
	wr, err := c.workflowRun(ctx, runID, attempts)
	switch {
	case err == nil:
		out.Workflow, out.Version, out.PlanHash = wr.Workflow, wr.Version, wr.PlanHash
		out.State, out.Error, out.Input, out.Steps = wr.State, wr.Error, wr.Input, wr.Steps
		out.Finished = workflow.Finished(wr.State)
		if out.FirstActivity.IsZero() || wr.CreatedAt.Before(out.FirstActivity) {
			out.FirstActivity = wr.CreatedAt
		}
		if wr.UpdatedAt.After(out.LastActivity) {
			out.LastActivity = wr.UpdatedAt
		}
	case !errors.Is(err, ErrNotFound):
		return nil, err
	case out.Total == 0:
		return nil, fmt.Errorf("run %q has no tasks: %w", runID, ErrNotFound)
	}
	return out, nil
}

// RunTasks lists a run's tasks like List (f's own attribute filters are
// kept; run_id is set to runID).
func (c *Client) RunTasks(ctx context.Context, runID string, f ListParams) ([]*Task, error) {
	if err := validRunID(runID); err != nil {
		return nil, err
	}
	attrs := map[string]string{}
	for k, v := range f.Attrs {
		attrs[k] = v
	}
	attrs[RunAttribute] = runID
	f.Attrs = attrs
	return c.List(ctx, f)
}

// eachRunTask calls fn with the summary (no payload) of every task of the
// run, a page of 10,000 at a time.
func (c *Client) eachRunTask(ctx context.Context, runID string, fn func(*Task)) error {
	f := ListParams{Attrs: map[string]string{RunAttribute: runID}, Limit: 10000, WithoutPayload: true}
	for {
		page, err := c.store.List(ctx, f)
		if err != nil {
			return err
		}
		for _, t := range page {
			fn(t)
		}
		if len(page) < f.Limit {
			return nil
		}
		f.AfterID = page[len(page)-1].ID
	}
}
