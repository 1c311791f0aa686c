package apiclient

import (
	"context"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// AddSchedule is POST /v1/schedules.
func (c *Client) AddSchedule(ctx context.Context, req api.ScheduleRequest) (*backstop.ScheduleInfo, error) {
	var out backstop.ScheduleInfo
	return &out, c.Do(ctx, "POST", "/v1/schedules", req, &out)
}

// Schedules is GET /v1/schedules.
func (c *Client) Schedules(ctx context.Context) ([]backstop.ScheduleInfo, error) {
	var out api.ScheduleList
	return out.Items, c.Do(ctx, "GET", "/v1/schedules", nil, &out)
}

// SetSchedulePaused is POST /v1/schedules/{name}/pause or /resume.
func (c *Client) SetSchedulePaused(ctx context.Context, name string, pause bool) (*backstop.ScheduleInfo, error) {
	path := "/v1/schedules/" + esc(name) + "/resume"
	if pause {
		path = "/v1/schedules/" + esc(name) + "/pause"
	}
	var out backstop.ScheduleInfo
	return &out, c.Do(ctx, "POST", path, nil, &out)
}

// RemoveSchedule is DELETE /v1/schedules/{name}.
func (c *Client) RemoveSchedule(ctx context.Context, name string) error {
	return c.Do(ctx, "DELETE", "/v1/schedules/"+esc(name), nil, nil)
}
