// Package apiclient is the Go client of Backstop's HTTP API, and of its
// remote worker protocol in particular. Tests use it; `backstop work
// --server` and the CLI-over-API will. It is internal until those settle
// its shape; then it becomes public for Go workers that do not link the
// library. It speaks only HTTP and never decides anything.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// Client calls one Backstop server with one token.
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:8080
	Token   string // bearer secret (bst_...); empty: anonymous (serve --dev)
	HTTP    *http.Client
}

// New makes a client; its HTTP client's timeout leaves room for long polls.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{Timeout: 90 * time.Second}}
}

// Do sends in (JSON, nil for no body) and decodes a 2xx answer into out (nil
// to discard). An error answer comes back as *api.Problem (its RetryAfter
// set from the Retry-After header), or as *StatusError when the body is not
// a problem document (a proxy's 502, say).
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, body)
	if err != nil {
		return err
	}
	if in != nil || (method != http.MethodGet && method != http.MethodHead) {
		// Every write is JSON, a body or not: the server refuses other
		// content types on writes.
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		after := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		var p api.Problem
		if json.Unmarshal(b, &p) == nil && p.Code != "" {
			p.RetryAfter = after
			return &p
		}
		return &StatusError{Method: method, Path: path, Status: resp.StatusCode, RetryAfter: after, Body: string(b)}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("backstop: %s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// Task is a task to enqueue, with the task's JSON keys.
type Task struct {
	ID             string            `json:"id,omitempty"`
	Queue          string            `json:"queue"`
	Kind           string            `json:"kind"`
	Payload        json.RawMessage   `json:"payload,omitempty"`
	Priority       int               `json:"priority,omitempty"`
	RunAt          *time.Time        `json:"run_at,omitempty"`
	Delay          bt.Duration       `json:"delay,omitempty"`
	MaxAttempts    int               `json:"max_attempts,omitempty"`
	Timeout        bt.Duration       `json:"timeout,omitempty"`
	Deadline       *time.Time        `json:"deadline,omitempty"`
	Retry          *bt.RetryPolicy   `json:"retry,omitempty"`
	Attributes     map[string]string `json:"attributes,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	UniqueFor      bt.Duration       `json:"unique_for,omitempty"`
	MergeKey       string            `json:"merge_key,omitempty"`
	Debounce       *Debounce         `json:"debounce,omitempty"`
	Progress       *bt.Progress      `json:"progress,omitempty"`
	Complexity     float64           `json:"complexity,omitempty"`
	OrderingKey    string            `json:"ordering_key,omitempty"`
	Sequence       int64             `json:"sequence,omitempty"`
	Trace          bool              `json:"trace,omitempty"`
}

// Debounce is a task's debounce, with the task's JSON keys.
type Debounce struct {
	Key     string      `json:"key"`
	For     bt.Duration `json:"for"`
	MaxWait bt.Duration `json:"max_wait,omitempty"`
}

func esc(id string) string { return url.PathEscape(id) }

// Enqueue adds one task.
func (c *Client) Enqueue(ctx context.Context, t Task) (*api.EnqueueResponse, error) {
	var out api.EnqueueResponse
	return &out, c.Do(ctx, "POST", "/v1/tasks", t, &out)
}

// EnqueueBatch adds tasks in one transaction.
func (c *Client) EnqueueBatch(ctx context.Context, ts []Task) (*api.BatchResponse, error) {
	raw := make([]json.RawMessage, len(ts))
	for i, t := range ts {
		b, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		raw[i] = b
	}
	var out api.BatchResponse
	return &out, c.Do(ctx, "POST", "/v1/tasks/batch", api.BatchRequest{Tasks: raw}, &out)
}

// Get returns a task with its executions.
func (c *Client) Get(ctx context.Context, id string) (*api.TaskView, error) {
	var out api.TaskView
	return &out, c.Do(ctx, "GET", "/v1/tasks/"+esc(id), nil, &out)
}

// List lists tasks; q takes queue, kind, state, attr, limit, after and
// include=payload. One page: items are summaries (no payload,
// payload_size) unless include=payload, and a page may end before limit at
// the server's byte budget (EachPage follows the cursor).
func (c *Client) List(ctx context.Context, q url.Values) (*api.ListResponse, error) {
	var out api.ListResponse
	path := "/v1/tasks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return &out, c.Do(ctx, "GET", path, nil, &out)
}

// Cancel cancels a task.
func (c *Client) Cancel(ctx context.Context, id string) (*api.TaskView, error) {
	var out api.TaskView
	return &out, c.Do(ctx, "POST", "/v1/tasks/"+esc(id)+"/cancel", nil, &out)
}

// CancelWith cancels a task with the request's reason.
func (c *Client) CancelWith(ctx context.Context, id string, req api.CancelRequest) (*api.TaskView, error) {
	var out api.TaskView
	return &out, c.Do(ctx, "POST", "/v1/tasks/"+esc(id)+"/cancel", req, &out)
}

// Queues counts tasks by queue and state.
func (c *Client) Queues(ctx context.Context) (*api.QueuesResponse, error) {
	var out api.QueuesResponse
	return &out, c.Do(ctx, "GET", "/v1/queues", nil, &out)
}

// Claim leases tasks, waiting up to req.Wait for work.
func (c *Client) Claim(ctx context.Context, req api.ClaimRequest) ([]api.ClaimedTask, error) {
	var out api.ClaimResponse
	if err := c.Do(ctx, "POST", "/v1/claim", req, &out); err != nil {
		return nil, err
	}
	return out.Tasks, nil
}

// StopClaim ends the wait of the claim named id (its ClaimRequest's
// ClaimID): it answers at once with the tasks it leased, if any. Held says
// whether the server that took this call held the claim.
func (c *Client) StopClaim(ctx context.Context, id string) (*api.ClaimStopResponse, error) {
	var out api.ClaimStopResponse
	return &out, c.Do(ctx, "POST", "/v1/claims/"+esc(id)+"/stop", nil, &out)
}

// Heartbeat extends a lease (and stores progress when given).
func (c *Client) Heartbeat(ctx context.Context, id string, req api.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	var out api.HeartbeatResponse
	return &out, c.Do(ctx, "POST", "/v1/tasks/"+esc(id)+"/heartbeat", req, &out)
}

// Progress reports progress (and extends the lease).
func (c *Client) Progress(ctx context.Context, id string, req api.ProgressRequest) (*api.HeartbeatResponse, error) {
	var out api.HeartbeatResponse
	return &out, c.Do(ctx, "POST", "/v1/tasks/"+esc(id)+"/progress", req, &out)
}

// Complete reports success.
func (c *Client) Complete(ctx context.Context, id string, req api.CompleteRequest) (*api.SettleResponse, error) {
	var out api.SettleResponse
	return &out, c.Do(ctx, "POST", "/v1/tasks/"+esc(id)+"/complete", req, &out)
}

// Fail reports a failed attempt with its outcome class.
func (c *Client) Fail(ctx context.Context, id string, req api.FailRequest) (*api.SettleResponse, error) {
	var out api.SettleResponse
	return &out, c.Do(ctx, "POST", "/v1/tasks/"+esc(id)+"/fail", req, &out)
}

// Show returns a task with one window of its executions (win: the newest
// win.Limit before win.Before; zero: the server's default) and its history
// (events); raw asks for the payload as stored (admin only, audited).
func (c *Client) Show(ctx context.Context, id string, raw bool, win backstop.ExecutionWindow) (*api.TaskDetail, error) {
	var out api.TaskDetail
	q := url.Values{}
	if raw {
		q.Set("raw", "true")
	}
	if win.Limit != 0 {
		q.Set("executions_limit", strconv.Itoa(win.Limit))
	}
	if win.Before != "" {
		q.Set("executions_before", win.Before)
	}
	path := "/v1/tasks/" + esc(id)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return &out, c.Do(ctx, "GET", path, nil, &out)
}

// Workers lists registered workers; q takes queue, state, limit, after.
func (c *Client) Workers(ctx context.Context, q url.Values) (*api.WorkerList, error) {
	var out api.WorkerList
	path := "/v1/workers"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return &out, c.Do(ctx, "GET", path, nil, &out)
}

// Worker returns one registered worker with its recent executions.
func (c *Client) Worker(ctx context.Context, id string) (*api.WorkerDetail, error) {
	var out api.WorkerDetail
	return &out, c.Do(ctx, "GET", "/v1/workers/"+esc(id), nil, &out)
}

// WorkerExecutions reads a page of a worker's executions (newest first).
func (c *Client) WorkerExecutions(ctx context.Context, id string, q url.Values) (*api.WorkerExecutionList, error) {
	var out api.WorkerExecutionList
	path := "/v1/workers/" + esc(id) + "/executions"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return &out, c.Do(ctx, "GET", path, nil, &out)
}

// AppendLogs sends lines of the attempt the lease token names.
func (c *Client) AppendLogs(ctx context.Context, id string, req api.LogsRequest) (*api.LogsResponse, error) {
	var out api.LogsResponse
	return &out, c.Do(ctx, "POST", "/v1/tasks/"+esc(id)+"/logs", req, &out)
}

// Logs reads a page of an execution's log (lines with seq > after).
func (c *Client) Logs(ctx context.Context, id, executionID string, after, limit int) (*api.LogPage, error) {
	var out api.LogPage
	q := url.Values{"after": {fmt.Sprint(after)}, "limit": {fmt.Sprint(limit)}}
	return &out, c.Do(ctx, "GET", "/v1/tasks/"+esc(id)+"/executions/"+esc(executionID)+"/logs?"+q.Encode(), nil, &out)
}

// Release gives the attempt back without charging it (a drain).
func (c *Client) Release(ctx context.Context, id string, req api.ReleaseRequest) (*api.SettleResponse, error) {
	var out api.SettleResponse
	return &out, c.Do(ctx, "POST", "/v1/tasks/"+esc(id)+"/release", req, &out)
}

// CompleteMany reports many successful attempts in one request.
func (c *Client) CompleteMany(ctx context.Context, items []api.CompletionItem) (*api.CompleteBatchResponse, error) {
	var out api.CompleteBatchResponse
	return &out, c.Do(ctx, "POST", "/v1/tasks/complete", api.CompleteBatchRequest{Completions: items}, &out)
}

// Publish writes one outbox message (POST /v1/messages).
func (c *Client) Publish(ctx context.Context, m api.MessageRequest) (*api.MessageResponse, error) {
	var out api.MessageResponse
	return &out, c.Do(ctx, "POST", "/v1/messages", m, &out)
}

// RelayStatus reads each sink's messages and each event-log checkpoint.
func (c *Client) RelayStatus(ctx context.Context) (*api.RelayStatus, error) {
	var out api.RelayStatus
	return &out, c.Do(ctx, "GET", "/v1/relay", nil, &out)
}
