package apiclient

import (
	"context"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// Limits lists the limits with their use.
func (c *Client) Limits(ctx context.Context) (*api.LimitsResponse, error) {
	var out api.LimitsResponse
	return &out, c.Do(ctx, "GET", "/v1/limits", nil, &out)
}

// SetLimit creates or replaces the named limit.
func (c *Client) SetLimit(ctx context.Context, name string, req api.LimitRequest) (*backstop.Limit, error) {
	var out backstop.Limit
	return &out, c.Do(ctx, "PUT", "/v1/limits/"+esc(name), req, &out)
}

// RemoveLimit removes the named limit (an unknown name: 404).
func (c *Client) RemoveLimit(ctx context.Context, name string) (*api.LimitRemoveResponse, error) {
	var out api.LimitRemoveResponse
	return &out, c.Do(ctx, "DELETE", "/v1/limits/"+esc(name), nil, &out)
}
