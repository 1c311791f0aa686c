package backstop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// A bulk job (a redrive, an action on live tasks) is one record in the
// store (store.Redrive: its kind, selection, snapshot, cursor, counts,
// runner and status) and its items' outcomes. runJob runs any kind: the
// runner's claim and heartbeat, the pace, the count, the batches from the
// cursor, cancellation and takeover from another process, and the finish.
// The job's own work is its count and its batch.

// jobRun is one run of a bulk job.
type jobRun struct {
	rec     store.Redrive
	resumed bool
	runner  string
	force   bool
	rate    float64
	// limit: at most this many in this run (0: all); batchSize per batch.
	limit, batchSize int
	// count says how many are still to do after the cursor.
	count func(ctx context.Context, after string) (int, error)
	// batch does up to n more after the cursor, each committed with the
	// record's advance; last is the new cursor, "" when nothing was left.
	batch func(ctx context.Context, after string, n int) (done, failed int, last string, err error)
}

// noun names the job in messages and commands: "redrive" (`backstop
// redrives resume ID`) for both kinds, which share the record.
const jobNoun = "redrive"

// runJob runs j from its record's cursor, reporting progress after each
// batch (RedriveProgress: Replayed counts the items done, Failed the
// others).
func (c *Client) runJob(ctx context.Context, j jobRun, progress func(RedriveProgress)) (RedriveProgress, error) {
	var out RedriveProgress
	rec := j.rec
	if err := c.claimRedrive(ctx, rec.ID, j.runner, j.force); err != nil {
		return out, err
	}
	defer c.beatRedrive(ctx, rec.ID, j.runner)()
	var left int
	if err := c.waitOutUnavailable(ctx, jobNoun+" "+rec.ID, func() (err error) {
		left, err = j.count(c.batchBudget(ctx), rec.Cursor)
		return err
	}, nil); err != nil {
		return out, engine.WhereErr(fmt.Errorf("%s: %w", jobNoun, err))
	}
	out = RedriveProgress{RedriveID: rec.ID, Kind: rec.Kind, Resumed: j.resumed, Snapshot: rec.Snapshot,
		Total: rec.Replayed + rec.Failed + left, Replayed: rec.Replayed, Failed: rec.Failed}
	report := func() {
		if progress != nil {
			progress(out)
		}
	}
	finish := func(status string) error {
		return c.waitOutUnavailable(ctx, jobNoun+" "+rec.ID, func() error {
			return c.store.FinishRedrive(context.WithoutCancel(ctx), rec.ID, status, c.now())
		}, nil)
	}
	if !j.resumed && left == 0 {
		out.Done, out.Empty = true, true
		if err := finish(RedriveEmpty); err != nil {
			return out, fmt.Errorf("%s: %w", jobNoun, err)
		}
		report()
		return out, nil
	}
	report()
	size := j.batchSize
	if size <= 0 {
		size = 500
	}
	if j.rate > 0 {
		size = min(size, max(1, int(j.rate/10)))
	}
	bucket := newTokenBucket(j.rate, size)
	start := time.Now()
	doneThisRun := 0
	after := rec.Cursor
	for {
		n := size
		if j.limit > 0 {
			n = min(n, j.limit-doneThisRun)
			if n <= 0 {
				return out, nil // the record stays running: the next run continues
			}
		}
		if err := bucket.wait(ctx, n); err != nil {
			return out, interrupted(out, err)
		}
		if err := ctx.Err(); err != nil {
			return out, interrupted(out, err)
		}
		var done, failed int
		var last string
		// A batch the store could not finish (busy, disk full, a lost
		// connection) is tried again from the record: each item is
		// committed with the record's advance, or neither is.
		resync := func() error {
			cur, err := c.store.GetRedrive(ctx, rec.ID)
			if err != nil {
				return err
			}
			after, out.Replayed, out.Failed = cur.Cursor, cur.Replayed, cur.Failed
			return nil
		}
		err := c.waitOutUnavailable(ctx, jobNoun+" "+rec.ID, func() (err error) {
			done, failed, last, err = j.batch(c.batchBudget(ctx), after, n)
			return err
		}, resync)
		if err != nil {
			out.Replayed += done
			out.Failed += failed
			if ctx.Err() != nil {
				return out, interrupted(out, ctx.Err())
			}
			if errors.Is(err, ErrWhereBudget) {
				return out, overBudget(out, err)
			}
			return out, err
		}
		if last == "" {
			out.Done = true
			if err := finish(RedriveDone); err != nil {
				return out, fmt.Errorf("%s: %w", jobNoun, err)
			}
			report()
			return out, nil
		}
		after = last
		// Canceled from any process (CancelRedrive): stop after this batch.
		cur, err := c.store.GetRedrive(ctx, rec.ID)
		if err == nil && cur.Runner != j.runner {
			out.Replayed += done
			out.Failed += failed
			report()
			return out, fmt.Errorf("%s %s %w after %d done: runner %q took it over", jobNoun, rec.ID, ErrInterrupted, out.Replayed, cur.Runner)
		}
		if err == nil && cur.Status == RedriveCanceled {
			out.Replayed += done
			out.Failed += failed
			report()
			return out, fmt.Errorf("%s %s %w: %w after %d done; `backstop redrives resume %s` continues it",
				jobNoun, rec.ID, ErrInterrupted, ErrRedriveCanceled, out.Replayed, rec.ID)
		}
		doneThisRun += done + failed
		out.Replayed += done
		out.Failed += failed
		if el := time.Since(start).Seconds(); el > 0 {
			out.Rate = float64(doneThisRun) / el
		}
		report()
	}
}
