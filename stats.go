package backstop

import (
	"context"
	"time"

	"github.com/backstophq/backstop/store"
)

// Stats is a snapshot of the store for operators (`backstop stats`): rows
// per queue and state, dead letters by status and reason, the oldest
// waiting and running work, table sizes and the leadership leases.
type Stats struct {
	*store.Stats
	// OldestPendingAge: how long the oldest claimable task has waited
	// since its run_at (0: none pending).
	OldestPendingAge Duration `json:"oldest_pending_age"`
	// OldestRunningAge: how long the oldest running attempt has held its
	// lease (0: none running).
	OldestRunningAge Duration `json:"oldest_running_age"`
	// At is when the snapshot was taken (the client's clock).
	At time.Time `json:"at"`
}

// Stats reads a snapshot of the store.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	st, err := c.store.Stats(ctx)
	if err != nil {
		return nil, err
	}
	now := c.now()
	out := &Stats{Stats: st, At: now}
	if st.OldestPendingRunAt != nil {
		out.OldestPendingAge = Duration(max(now.Sub(*st.OldestPendingRunAt), 0))
	}
	if st.OldestRunningSince != nil {
		out.OldestRunningAge = Duration(max(now.Sub(*st.OldestRunningSince), 0))
	}
	return out, nil
}

// View names an operator view; see the constants.
type View = store.View

// The operator views of seed 002.
const (
	// ViewPendingRetries: scheduled tasks that already failed (attempt > 0).
	ViewPendingRetries = store.ViewPendingRetries
	// ViewRetryExhausted: dead letters with reason attempts_exhausted.
	ViewRetryExhausted = store.ViewRetryExhausted
	// ViewRecentFailures: tasks with a failed attempt in the last 24 hours,
	// most recent failure first.
	ViewRecentFailures = store.ViewRecentFailures
)

// ListView lists at most limit tasks (default 100, at most 10,000) of an
// operator view.
func (c *Client) ListView(ctx context.Context, v View, limit int) ([]*Task, error) {
	if limit < 0 || limit > 10000 {
		return nil, invalid("limit", "must be between 1 and 10000")
	}
	known := false
	for _, k := range store.Views {
		known = known || k == v
	}
	if !known {
		return nil, invalid("view", "unknown view %q (want pending-retries, retry-exhausted or recent-failures)", v)
	}
	return c.store.View(ctx, v, c.now(), limit)
}
