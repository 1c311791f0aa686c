package backstop

import (
	"context"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// RunAttribute is the attribute that groups tasks into a run (a batch of
// related tasks a producer enqueued together).
const RunAttribute = "run_id"

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
	f := ListParams{Attrs: map[string]string{RunAttribute: runID}, Limit: 10000}
	for {
		page, err := c.store.List(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, t := range page {
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
		}
		if len(page) < f.Limit {
			break
		}
		f.AfterID = page[len(page)-1].ID
	}
	if out.Total == 0 {
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
