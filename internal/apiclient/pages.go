package apiclient

import (
	"context"
	"maps"
	"net/url"
	"strconv"

	"github.com/backstophq/backstop/internal/api"
)

// EachPage reads a task list page by page with get (Client.List, DLQList,
// or a closure over RunTasks), from q's after on, following next_cursor,
// and calls fn with each page until the last one, until fn answers false
// or an error, or, when limit > 0, until limit items were read (each
// request asks for what is left).
func EachPage(ctx context.Context, q url.Values, limit int, get func(context.Context, url.Values) (*api.ListResponse, error),
	fn func(*api.ListResponse) (more bool, err error)) error {
	q = maps.Clone(q)
	if q == nil {
		q = url.Values{}
	}
	got := 0
	for {
		if limit > 0 {
			q.Set("limit", strconv.Itoa(limit-got))
		}
		page, err := get(ctx, q)
		if err != nil {
			return err
		}
		got += len(page.Items)
		more, err := fn(page)
		if err != nil || !more || page.NextCursor == nil || len(page.Items) == 0 || (limit > 0 && got >= limit) {
			return err
		}
		q.Set("after", *page.NextCursor)
	}
}
