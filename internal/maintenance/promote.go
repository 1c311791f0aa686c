package maintenance

import (
	"context"
	"time"
)

// Batch is how many rows one round of a service handles per statement.
const Batch = 500

// PromoteStore is what scheduled-task promotion needs from a store.
type PromoteStore interface {
	PromoteScheduled(ctx context.Context, now time.Time, limit int) (int, error)
}

// Promoter makes scheduled tasks whose time has come pending.
type Promoter struct {
	base
	store PromoteStore
	now   func() time.Time
}

// NewPromoter makes the "promote_scheduled" service.
func NewPromoter(s PromoteStore, now func() time.Time, every time.Duration) *Promoter {
	return &Promoter{base: base{"promote_scheduled", every}, store: s, now: now}
}

// RunOnce promotes in batches until a batch is not full.
func (p *Promoter) RunOnce(ctx context.Context) error {
	for {
		n, err := p.store.PromoteScheduled(ctx, p.now(), Batch)
		if err != nil || n < Batch {
			return err
		}
	}
}
