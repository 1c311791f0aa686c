package apiclient

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/audit"
)

// The dead-letter, queue and run endpoints.

func withQuery(path string, q url.Values) string {
	if len(q) > 0 {
		return path + "?" + q.Encode()
	}
	return path
}

// DLQList lists dead letters; q takes the filters of GET /v1/dlq and
// include=payload. One page, as Client.List.
func (c *Client) DLQList(ctx context.Context, q url.Values) (*api.ListResponse, error) {
	var out api.ListResponse
	return &out, c.Do(ctx, "GET", withQuery("/v1/dlq", q), nil, &out)
}

// DLQShow returns a dead letter with its executions and events.
func (c *Client) DLQShow(ctx context.Context, id string) (*api.DeadLetterView, error) {
	var out api.DeadLetterView
	return &out, c.Do(ctx, "GET", "/v1/dlq/"+esc(id), nil, &out)
}

// Replay replays one dead letter.
func (c *Client) Replay(ctx context.Context, id string, req api.ReplayRequest) (*api.ReplayResponse, error) {
	var out api.ReplayResponse
	return &out, c.Do(ctx, "POST", "/v1/dlq/"+esc(id)+"/replay", req, &out)
}

// Discard discards a dead letter; the reason is required.
func (c *Client) Discard(ctx context.Context, id, reason string) (*api.TaskView, error) {
	var out api.TaskView
	return &out, c.Do(ctx, "POST", "/v1/dlq/"+esc(id)+"/discard", api.DiscardRequest{Reason: reason}, &out)
}

// Resolve marks a dead letter handled by hand.
func (c *Client) Resolve(ctx context.Context, id, note string) (*api.TaskView, error) {
	var out api.TaskView
	return &out, c.Do(ctx, "POST", "/v1/dlq/"+esc(id)+"/resolve", api.ResolveRequest{Note: note}, &out)
}

// ResolveWith marks a dead letter handled by hand, with a reason and/or note.
func (c *Client) ResolveWith(ctx context.Context, id string, req api.ResolveRequest) (*api.TaskView, error) {
	var out api.TaskView
	return &out, c.Do(ctx, "POST", "/v1/dlq/"+esc(id)+"/resolve", req, &out)
}

// Redrive starts a redrive in the server (and waits up to req.Wait for it).
func (c *Client) Redrive(ctx context.Context, req api.RedriveRequest) (*api.RedriveStatus, error) {
	var out api.RedriveStatus
	return &out, c.Do(ctx, "POST", "/v1/dlq/redrive", req, &out)
}

// TaskJob starts an action on live tasks (POST /v1/tasks/bulk): a bulk
// job polled, canceled and resumed as a redrive.
func (c *Client) TaskJob(ctx context.Context, req api.TaskJobRequest) (*api.RedriveStatus, error) {
	var out api.RedriveStatus
	return &out, c.Do(ctx, "POST", "/v1/tasks/bulk", req, &out)
}

// RedriveStatus reports a redrive the server runs or ran.
func (c *Client) RedriveStatus(ctx context.Context, id string) (*api.RedriveStatus, error) {
	var out api.RedriveStatus
	return &out, c.Do(ctx, "GET", "/v1/redrives/"+esc(id), nil, &out)
}

// CancelRedrive stops a running redrive (the same Redrive again resumes it).
func (c *Client) CancelRedrive(ctx context.Context, id string) (*api.RedriveStatus, error) {
	var out api.RedriveStatus
	return &out, c.Do(ctx, "POST", "/v1/redrives/"+esc(id)+"/cancel", nil, &out)
}

// DLQGroups counts dead letters by reason and by error; q takes the
// filters of GET /v1/dlq and limit (error groups).
func (c *Client) DLQGroups(ctx context.Context, q url.Values) (*api.DLQGroups, error) {
	var out api.DLQGroups
	return &out, c.Do(ctx, "GET", withQuery("/v1/dlq/groups", q), nil, &out)
}

// PurgeDLQ deletes dead letters for good.
func (c *Client) PurgeDLQ(ctx context.Context, req api.PurgeRequest) (*api.PurgeResponse, error) {
	var out api.PurgeResponse
	return &out, c.Do(ctx, "POST", "/v1/dlq/purge", req, &out)
}

// CloseDLQ discards or resolves a batch of the open dead letters matching
// a filter (POST /v1/dlq/close); call again with the answer's snapshot
// while it says more.
func (c *Client) CloseDLQ(ctx context.Context, req api.CloseRequest) (*backstop.CloseMatchingResult, error) {
	var out backstop.CloseMatchingResult
	return &out, c.Do(ctx, "POST", "/v1/dlq/close", req, &out)
}

// ExportDLQ streams the export (NDJSON) and calls fn for each line.
func (c *Client) ExportDLQ(ctx context.Context, q url.Values, fn func(api.ExportLine) error) (int, error) {
	path := withQuery("/v1/dlq/export", q)
	req, err := http.NewRequestWithContext(ctx, "GET", c.BaseURL+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var p api.Problem
		if json.Unmarshal(b, &p) == nil && p.Code != "" {
			return 0, &p
		}
		return 0, fmt.Errorf("backstop: GET %s: HTTP %d: %.200s", path, resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	n := 0
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var line api.ExportLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return n, fmt.Errorf("backstop: export line %d: %w", n+1, err)
		}
		if err := fn(line); err != nil {
			return n, err
		}
		n++
	}
	return n, sc.Err()
}

// PauseQueue stops workers from claiming the queue.
func (c *Client) PauseQueue(ctx context.Context, name string) (*api.QueuePauseResponse, error) {
	return c.SetQueuePaused(ctx, name, true, "")
}

// ResumeQueue lets workers claim the queue again.
func (c *Client) ResumeQueue(ctx context.Context, name string) (*api.QueuePauseResponse, error) {
	return c.SetQueuePaused(ctx, name, false, "")
}

// SetQueuePaused pauses or resumes a queue with the operator's reason (""
// for none), recorded in the audit stream.
func (c *Client) SetQueuePaused(ctx context.Context, name string, pause bool, reason string) (*api.QueuePauseResponse, error) {
	path := "/v1/queues/" + esc(name) + "/resume"
	if pause {
		path = "/v1/queues/" + esc(name) + "/pause"
	}
	var body any
	if reason != "" {
		body = api.QueuePauseRequest{Reason: reason}
	}
	var out api.QueuePauseResponse
	return &out, c.Do(ctx, "POST", path, body, &out)
}

// Run summarises the tasks sharing a run_id.
func (c *Client) Run(ctx context.Context, runID string) (*backstop.Run, error) {
	var out backstop.Run
	return &out, c.Do(ctx, "GET", "/v1/runs/"+esc(runID), nil, &out)
}

// RunTasks lists a run's tasks; q takes the query of GET /v1/tasks. One
// page, as Client.List.
func (c *Client) RunTasks(ctx context.Context, runID string, q url.Values) (*api.ListResponse, error) {
	var out api.ListResponse
	return &out, c.Do(ctx, "GET", withQuery("/v1/runs/"+esc(runID)+"/tasks", q), nil, &out)
}

// Events reads one page of an event stream after a cursor (GET /v1/events).
func (c *Client) Events(ctx context.Context, p backstop.ReadEventsParams) (backstop.EventPage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"stream": p.Stream, "after": p.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var out backstop.EventPage
	return out, c.Do(ctx, "GET", withQuery("/v1/events", q), nil, &out)
}

// Redrives lists the redrives, newest first (q: before, limit).
func (c *Client) Redrives(ctx context.Context, q url.Values) (*api.RedriveList, error) {
	var out api.RedriveList
	return &out, c.Do(ctx, "GET", withQuery("/v1/redrives", q), nil, &out)
}

// RedriveItems lists a redrive's items (q: outcome, failed, after, limit).
func (c *Client) RedriveItems(ctx context.Context, id string, q url.Values) (*api.RedriveItemList, error) {
	var out api.RedriveItemList
	return &out, c.Do(ctx, "GET", withQuery("/v1/redrives/"+esc(id)+"/items", q), nil, &out)
}

// ResumeRedrive continues an unfinished redrive in the server.
func (c *Client) ResumeRedrive(ctx context.Context, id string, req api.ResumeRequest) (*api.RedriveStatus, error) {
	var out api.RedriveStatus
	return &out, c.Do(ctx, "POST", "/v1/redrives/"+esc(id)+"/resume", req, &out)
}

// Audit reads one page of the operators' actions (GET /v1/audit; q: actor,
// type, since, until, target, after, limit).
func (c *Client) Audit(ctx context.Context, q url.Values) (audit.Page, error) {
	var out audit.Page
	return out, c.Do(ctx, "GET", withQuery("/v1/audit", q), nil, &out)
}
