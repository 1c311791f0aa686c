package backstop

import (
	"context"
	"slices"
)

// A task replayed again and again collects executions without end; the
// operator's views read them a window at a time, newest last as Get lists
// them.

// Bounds of an executions window.
const (
	DefaultExecutionsLimit = 100
	MaxExecutionsLimit     = 1000
)

// ExecutionWindow selects the executions GetWindow returns: the newest
// Limit (default DefaultExecutionsLimit, at most MaxExecutionsLimit) of
// those older than the execution Before ("": from the newest), oldest
// first.
type ExecutionWindow struct {
	Limit  int
	Before string // an ExecutionsPage.Next
}

// ExecutionsPage is what a window left out: Total executions in all, and
// Next, the cursor of the older ones ("" when none are left).
type ExecutionsPage struct {
	Total int
	Next  string
}

// GetWindow returns a task with one window of its executions.
func (c *Client) GetWindow(ctx context.Context, id string, w ExecutionWindow) (*Task, ExecutionsPage, error) {
	if w.Limit < 0 || w.Limit > MaxExecutionsLimit {
		return nil, ExecutionsPage{}, invalid("executions_limit", "must be between 1 and %d", MaxExecutionsLimit)
	}
	limit := w.Limit
	if limit == 0 {
		limit = DefaultExecutionsLimit
	}
	t, err := c.Get(ctx, id)
	if err != nil {
		return nil, ExecutionsPage{}, err
	}
	all := t.Executions
	end := len(all)
	if w.Before != "" {
		end = slices.IndexFunc(all, func(e Execution) bool { return e.ExecutionID == w.Before })
		if end < 0 {
			return nil, ExecutionsPage{}, invalid("executions_before", "%q is not an execution of task %s", w.Before, t.ID)
		}
	}
	start := max(0, end-limit)
	t.Executions = all[start:end:end]
	page := ExecutionsPage{Total: len(all)}
	if start > 0 {
		page.Next = all[start].ExecutionID
	}
	return t, page, nil
}
