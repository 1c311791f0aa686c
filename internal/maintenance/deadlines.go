package maintenance

import (
	"context"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// Deadlines dead-letters the waiting tasks whose deadline passed before
// they could run (reason expired), through Engine.Settle.
type Deadlines struct {
	base
	e *engine.Engine
}

// NewDeadlines makes the "deadlines" service.
func NewDeadlines(e *engine.Engine, every time.Duration) *Deadlines {
	return &Deadlines{base: base{"deadlines", every}, e: e}
}

// RunOnce dead-letters one batch of tasks past their deadline.
func (d *Deadlines) RunOnce(ctx context.Context) error {
	late, err := d.e.Store().PastDeadline(ctx, d.e.Now(), Batch)
	if err != nil || len(late) == 0 {
		return err
	}
	now := d.e.Now()
	ss := make([]store.Settlement, len(late))
	for i, t := range late {
		ss[i] = store.Settlement{TaskID: t.ID, FinishedAt: now, State: bt.StateDead,
			DeadReason: bt.ReasonExpired, Error: "deadline passed before the task could run"}
	}
	oks, err := d.e.Settle(ctx, ss)
	if err != nil {
		return err
	}
	d.e.DeadlinesSettled(ctx, late, ss, oks)
	return nil
}
