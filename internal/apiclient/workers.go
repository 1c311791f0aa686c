package apiclient

import (
	"context"

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
