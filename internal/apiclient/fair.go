package apiclient

import (
	"context"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// FairQueues lists the fair queues with their pending tasks by value.
func (c *Client) FairQueues(ctx context.Context) ([]backstop.FairQueueStatus, error) {
	var out api.FairQueuesResponse
	return out.Items, c.Do(ctx, "GET", "/v1/fair-queues", nil, &out)
}

// SetFair makes the queue fair (or replaces its attribute and weights).
func (c *Client) SetFair(ctx context.Context, queue string, req api.FairRequest) (*backstop.FairQueue, error) {
	var out backstop.FairQueue
	return &out, c.Do(ctx, "PUT", "/v1/queues/"+esc(queue)+"/fair", req, &out)
}

// RemoveFair turns the queue's fairness off (not fair: 404) with the
// operator's reason ("" for none), recorded in the audit stream.
func (c *Client) RemoveFair(ctx context.Context, queue, reason string) (*api.FairRemoveResponse, error) {
	var out api.FairRemoveResponse
	var body any
	if reason != "" {
		body = api.FairRemoveRequest{Reason: reason}
	}
	return &out, c.Do(ctx, "DELETE", "/v1/queues/"+esc(queue)+"/fair", body, &out)
}
