package apiclient

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/store"
)

// ApplyWorkflow registers a definition (JSON, e.g. a Definition's
// canonical form): POST /v1/workflows.
func (c *Client) ApplyWorkflow(ctx context.Context, def json.RawMessage) (*api.WorkflowView, error) {
	var out api.WorkflowView
	return &out, c.Do(ctx, "POST", "/v1/workflows", def, &out)
}

// Workflows lists the latest version of each workflow.
func (c *Client) Workflows(ctx context.Context) ([]backstop.WorkflowVersion, error) {
	var out struct {
		Workflows []backstop.WorkflowVersion `json:"workflows"`
	}
	return out.Workflows, c.Do(ctx, "GET", "/v1/workflows", nil, &out)
}

// Workflow reads one version of a workflow (0: the latest).
func (c *Client) Workflow(ctx context.Context, name string, version int) (*api.WorkflowView, error) {
	q := url.Values{}
	if version > 0 {
		q.Set("version", strconv.Itoa(version))
	}
	var out api.WorkflowView
	return &out, c.Do(ctx, "GET", withQuery("/v1/workflows/"+esc(name), q), nil, &out)
}

// RunWorkflow starts a run: POST /v1/workflows/{name}/runs.
func (c *Client) RunWorkflow(ctx context.Context, name string, req api.RunRequest) (*backstop.RunStarted, error) {
	var out backstop.RunStarted
	return &out, c.Do(ctx, "POST", "/v1/workflows/"+esc(name)+"/runs", req, &out)
}

// RunWorkflows starts many runs in one transaction (POST /v1/runs/batch,
// at most api.MaxBatch): all or nothing.
func (c *Client) RunWorkflows(ctx context.Context, ps []backstop.RunWorkflowParams) ([]backstop.RunStarted, error) {
	raw := make([]json.RawMessage, len(ps))
	for i, p := range ps {
		b, err := json.Marshal(runObject{Workflow: p.Workflow, Version: p.Version, Input: p.Input, RunID: p.RunID, Trace: p.Trace})
		if err != nil {
			return nil, err
		}
		raw[i] = b
	}
	var out api.RunBatchResponse
	if err := c.Do(ctx, "POST", "/v1/runs/batch", api.RunBatchRequest{Runs: raw}, &out); err != nil {
		return nil, err
	}
	return out.Results, nil
}

// runObject is one run of POST /v1/runs/batch.
type runObject struct {
	Workflow string          `json:"workflow"`
	Version  int             `json:"version,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	RunID    string          `json:"run_id,omitempty"`
	Trace    bool            `json:"trace,omitempty"`
}

// RunsPage is one page of GET /v1/runs.
type RunsPage struct {
	Runs       []store.RunRecord `json:"runs"`
	NextCursor string            `json:"next_cursor"`
}

// Runs lists workflow runs, newest first.
func (c *Client) Runs(ctx context.Context, f backstop.ListRunsParams) (*RunsPage, error) {
	q := url.Values{}
	if f.Workflow != "" {
		q.Set("workflow", f.Workflow)
	}
	if len(f.States) > 0 {
		s := make([]string, len(f.States))
		for i, st := range f.States {
			s[i] = string(st)
		}
		q.Set("state", strings.Join(s, ","))
	}
	if f.BeforeID != "" {
		q.Set("before", f.BeforeID)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out RunsPage
	return &out, c.Do(ctx, "GET", withQuery("/v1/runs", q), nil, &out)
}

// CancelRun cancels a workflow run.
func (c *Client) CancelRun(ctx context.Context, runID string) (*backstop.WorkflowRun, error) {
	return c.CancelRunWhy(ctx, runID, "")
}

// CancelRunWhy cancels a run with the operator's reason ("" for none),
// recorded in its run.canceled event.
func (c *Client) CancelRunWhy(ctx context.Context, runID, reason string) (*backstop.WorkflowRun, error) {
	var body any
	if reason != "" {
		body = api.CancelRequest{Reason: reason}
	}
	var out backstop.WorkflowRun
	return &out, c.Do(ctx, "POST", "/v1/runs/"+esc(runID)+"/cancel", body, &out)
}

// CompleteStep forces a run's step (item of a fan-out step) to succeeded
// with result (empty: null) and the operator's reason.
func (c *Client) CompleteStep(ctx context.Context, runID, step string, item int, result json.RawMessage, reason string) (*backstop.WorkflowRun, error) {
	var out backstop.WorkflowRun
	body := api.CompleteStepRequest{Item: item, Result: result, Reason: reason}
	return &out, c.Do(ctx, "POST", "/v1/runs/"+esc(runID)+"/steps/"+esc(step)+"/complete", body, &out)
}
