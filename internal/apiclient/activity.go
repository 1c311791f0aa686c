package apiclient

import (
	"context"
	"net/url"

	"github.com/backstophq/backstop"
)

// ActivityHistory reads GET /v1/activity?window= (24h or 7d), of one
// queue and/or kind when given.
func (c *Client) ActivityHistory(ctx context.Context, window, queue, kind string) (*backstop.ActivityReport, error) {
	q := url.Values{"window": {window}}
	if queue != "" {
		q.Set("queue", queue)
	}
	if kind != "" {
		q.Set("kind", kind)
	}
	var out backstop.ActivityReport
	return &out, c.Do(ctx, "GET", "/v1/activity?"+q.Encode(), nil, &out)
}
