package maintenance

import (
	"context"
	"errors"
	"time"

	"github.com/backstophq/backstop/internal/activity"
	"github.com/backstophq/backstop/store"
)

// ActivitySettle is how long after a time the rollup waits before it
// counts the work finished up to it: settles in flight commit with their
// finish time a little in the past, and processes' clocks are a little
// apart. Work that commits later than this after it finished is not
// counted.
const ActivitySettle = 10 * time.Second

// activityChunk bounds the span of history one transaction of a round
// reads; activityBackfill is how far back a rollup that never ran starts
// (from the start of that five-minute bucket).
const (
	activityChunk    = time.Hour
	activityBackfill = time.Hour
)

// Activity rolls the finished work up into the activity rollup
// (internal/activity, docs/observability.md): each round reads the work
// finished since the rollup's watermark up to ActivitySettle ago, an hour
// of history at most per transaction, through the indexes that already
// hold finished tasks, failed attempts and dead tasks (never a scan of
// the task table), adds it to the five-minute and hourly rows, and moves
// the watermark in the same transaction: after a crash the next round
// reads the same work again, and two rounds never both add it. It then
// deletes the rows past each resolution's keep (two days of five-minute
// rows, eight days of hourly ones).
type Activity struct {
	base
	store store.ActivityRollup
	now   func() time.Time
}

// NewActivity makes the "activity_rollup" service.
func NewActivity(s store.ActivityRollup, now func() time.Time, every time.Duration) *Activity {
	return &Activity{base: base{"activity_rollup", every}, store: s, now: now}
}

// RunOnce rolls up the work finished since the watermark, then prunes.
func (a *Activity) RunOnce(ctx context.Context) error {
	now := a.now().UTC()
	upto := now.Add(-ActivitySettle).Truncate(time.Second)
	from, ok, err := a.store.ActivityWatermark(ctx)
	if err != nil {
		return err
	}
	at := from
	if !ok {
		at = upto.Add(-activityBackfill).Truncate(activity.Fine.Width)
	}
	// After a long outage, work older than the longest keep would be
	// deleted as soon as written: start at the keep.
	if oldest := now.Add(-activity.Coarse.Keep).Truncate(activity.Coarse.Width); at.Before(oldest) {
		at = oldest
	}
	for at.Before(upto) {
		end := at.Add(activityChunk)
		if end.After(upto) {
			end = upto
		}
		rows, err := a.store.FinishedWork(ctx, at, end, activity.Fine.Width, activity.Bounds)
		if err != nil {
			return err
		}
		err = a.store.AddActivity(ctx, from, end, withCoarse(rows))
		if errors.Is(err, store.ErrConflict) {
			return nil // another round rolled this span up first
		}
		if err != nil {
			return err
		}
		from, at = end, end
	}
	for _, r := range activity.Resolutions {
		if _, err := a.store.DeleteActivity(ctx, r.Width, now.Add(-r.Keep).Truncate(r.Width)); err != nil {
			return err
		}
	}
	return nil
}

// withCoarse adds to the five-minute rows the hourly rows they sum to.
func withCoarse(fine []store.ActivityRow) []store.ActivityRow {
	type key struct {
		b           time.Time
		queue, kind string
	}
	idx := map[key]int{}
	out := fine
	for _, r := range fine {
		k := key{r.Bucket.Truncate(activity.Coarse.Width), r.Queue, r.Kind}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, store.ActivityRow{Width: activity.Coarse.Width, Bucket: k.b, Queue: r.Queue, Kind: r.Kind})
		}
		out[i].Add(r)
	}
	return out
}
