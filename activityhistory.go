package backstop

import (
	"context"

	"time"

	"github.com/backstophq/backstop/internal/activity"
	"github.com/backstophq/backstop/internal/engine"
)

// ActivityReport is a window of finished-work history from the activity
// rollup: a series of buckets (five minutes over 24 h, an hour over 7 d)
// with throughput, failure rate and wait/run latency percentiles, the
// window's totals, and its queue × kind groups (docs/observability.md).
type ActivityReport = activity.Report

// ActivityHistory reads the activity rollup over window ("24h" or "7d"),
// of one queue and/or kind when given. The rollup is written by the
// maintenance leader (the activity_rollup service) from the work finished
// since its watermark, ActivitySettle behind the clock; the report names
// that watermark (RolledUpTo).
func (c *Client) ActivityHistory(ctx context.Context, window, queue, kind string) (*ActivityReport, error) {
	w, err := activity.ParseWindow(window)
	if err != nil {
		return nil, invalid("window", "%q: want 24h or 7d", window)
	}
	for _, f := range []struct{ name, v string }{{"queue", queue}, {"kind", kind}} {
		if f.v == "" {
			continue
		}
		if err := engine.ValidName(f.v); err != nil {
			return nil, invalid(f.name, "%v", err)
		}
	}
	now := c.now()
	from, until := w.Range(now)
	rows, err := c.store.ReadActivity(ctx, w.Res.Width, from, until, queue, kind)
	if err != nil {
		return nil, err
	}
	var rolled *time.Time
	at, ok, err := c.store.ActivityWatermark(ctx)
	if err != nil {
		return nil, err
	}
	if ok {
		rolled = &at
	}
	return activity.Build(w, now, queue, kind, rows, rolled), nil
}
