package store

import (
	"context"
	"time"
)

// ActivityRow is one row of the activity rollup: the work of one queue and
// kind finished in one bucket [Bucket, Bucket+Width). Wait and Run are
// latency histograms as counts per bucket of the caller's bounds
// (microseconds, ascending; the last count is past the last bound); rows
// merge by adding counts and histograms element by element. The buckets'
// meaning is internal/activity's; the store keeps and adds them.
type ActivityRow struct {
	Width  time.Duration
	Bucket time.Time
	Queue  string
	Kind   string
	// Succeeded tasks; Failed attempts, Retried those of them the task
	// outlived; Dead tasks.
	Succeeded, Failed, Retried, Dead int64
	Wait, Run                        []int64
}

// ActivityRollup stores the activity rollup (the maintenance service
// internal/maintenance/activity.go writes it; GET /v1/activity reads it).
type ActivityRollup interface {
	// FinishedWork reads the work finished in [since, until), per bucket
	// of width and per queue and kind, from three range reads of the
	// indexes the finished rows are already in (finished tasks, failed
	// attempts, dead tasks; never a scan of the task table): the tasks
	// that succeeded (their wait, run_at to the attempt's start, and run,
	// start to end, in the histograms of bounds), the attempts that
	// failed (their run; Retried when the task outlived the attempt) and
	// the tasks that died. Rows carry Width and Bucket; groups without
	// work are left out.
	FinishedWork(ctx context.Context, since, until time.Time, width time.Duration, bounds []int64) ([]ActivityRow, error)
	// AddActivity adds rows to the rollup (a row of the same width,
	// bucket, queue and kind has its counts and histograms added to) and
	// moves the rollup's watermark from from (zero: the rollup has none
	// yet) to to, in one transaction: when the watermark is no longer
	// from (another round moved it), nothing is written and the error is
	// ErrConflict. So a round that fails or crashes leaves both as they
	// were and the next round reads the same work again.
	AddActivity(ctx context.Context, from, to time.Time, rows []ActivityRow) error
	// ActivityWatermark is the end of the work the rollup holds (ok false:
	// the rollup never ran).
	ActivityWatermark(ctx context.Context) (at time.Time, ok bool, err error)
	// ReadActivity reads the rows of width in [since, until), of queue
	// and kind when not empty, in bucket order.
	ReadActivity(ctx context.Context, width time.Duration, since, until time.Time, queue, kind string) ([]ActivityRow, error)
	// DeleteActivity deletes the rows of width whose bucket started before
	// before and says how many it deleted.
	DeleteActivity(ctx context.Context, width time.Duration, before time.Time) (int, error)
}

// Add adds o's counts and histograms to r's (o's width, bucket, queue and
// kind are not looked at).
func (r *ActivityRow) Add(o ActivityRow) {
	r.Succeeded += o.Succeeded
	r.Failed += o.Failed
	r.Retried += o.Retried
	r.Dead += o.Dead
	r.Wait = addCounts(r.Wait, o.Wait)
	r.Run = addCounts(r.Run, o.Run)
}

// addCounts adds b into a, element by element, and returns a.
func addCounts(a, b []int64) []int64 {
	if len(b) > len(a) {
		a = append(a, make([]int64, len(b)-len(a))...)
	}
	for i, c := range b {
		a[i] += c
	}
	return a
}
