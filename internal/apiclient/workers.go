package apiclient

import (
	"context"
	"net/url"
	"strconv"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// RegisterWorker registers a remote worker as it starts.
func (c *Client) RegisterWorker(ctx context.Context, req api.RegisterWorkerRequest) (*api.WorkerRegistration, error) {
	var out api.WorkerRegistration
	return &out, c.Do(ctx, "POST", "/v1/workers", req, &out)
}

// WorkerHeartbeat says a registered worker is alive (draining: it stopped
// claiming).
func (c *Client) WorkerHeartbeat(ctx context.Context, id string, draining bool) (*backstop.WorkerInfo, error) {
	var out backstop.WorkerInfo
	return &out, c.Do(ctx, "POST", "/v1/workers/"+esc(id)+"/heartbeat", api.WorkerHeartbeatRequest{Draining: draining}, &out)
}

// StopWorker says a registered worker drained and stopped.
func (c *Client) StopWorker(ctx context.Context, id string) (*backstop.WorkerInfo, error) {
	var out backstop.WorkerInfo
	return &out, c.Do(ctx, "POST", "/v1/workers/"+esc(id)+"/stop", struct{}{}, &out)
}

// Events reads one page of an event stream after a cursor (GET /v1/events).
func (c *Client) Events(ctx context.Context, stream, after string, limit int) (*backstop.EventPage, error) {
	q := url.Values{}
	if stream != "" {
		q.Set("stream", stream)
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out backstop.EventPage
	return &out, c.Do(ctx, "GET", "/v1/events?"+q.Encode(), nil, &out)
}
