package maintenance

import (
	"context"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// DeadlineStore is what deadline expiry needs from a store.
type DeadlineStore interface {
	PastDeadline(ctx context.Context, now time.Time, limit int) ([]*bt.Task, error)
	Settle(ctx context.Context, s []store.Settlement) ([]bool, error)
}

// Deadlines dead-letters waiting tasks past their deadline (reason
// expired).
type Deadlines struct {
	base
	store   DeadlineStore
	now     func() time.Time
	settled Settled
}

// NewDeadlines makes the "deadlines" service.
func NewDeadlines(s DeadlineStore, now func() time.Time, every time.Duration, settled Settled) *Deadlines {
	return &Deadlines{base: base{"deadlines", every}, store: s, now: now, settled: settled}
}

// RunOnce dead-letters one batch of late tasks.
func (d *Deadlines) RunOnce(ctx context.Context) error {
	late, err := d.store.PastDeadline(ctx, d.now(), Batch)
	if err != nil || len(late) == 0 {
		return err
	}
	now := d.now()
	ss := make([]store.Settlement, len(late))
	for i, t := range late {
		ss[i] = store.Settlement{TaskID: t.ID, FinishedAt: now, State: bt.StateDead,
			DeadReason: bt.ReasonExpired, Error: "deadline passed before the task could run"}
	}
	oks, err := d.store.Settle(ctx, ss)
	if err != nil {
		return err
	}
	d.settled(ctx, late, ss, oks)
	return nil
}
