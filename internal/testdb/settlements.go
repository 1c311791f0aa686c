package testdb

import (
	"context"
	"slices"
	"sync"

	"github.com/backstophq/backstop/store"
)

// SettleRecorder is a REAL store (SQLite or Postgres) with a recorder on
// its Settle: every batch that reaches the store is kept, as the engine
// handed it over, then applied by the store unchanged. Drivers do not
// write Settlement.Result (the engine records it on a workflow step), so
// tests observe results here, at the settle seam; everything else is the
// store's own behaviour.
type SettleRecorder struct {
	store.Store

	mu      sync.Mutex
	batches [][]store.Settlement
}

var _ store.Store = (*SettleRecorder)(nil)

// RecordSettlements wraps s.
func RecordSettlements(s store.Store) *SettleRecorder {
	r := &SettleRecorder{Store: s}
	return r
}

// Settle records the batch, then settles it in the real store.
func (r *SettleRecorder) Settle(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(ss))
	r.mu.Unlock()
	return r.Store.Settle(ctx, ss)
}

// Batches is every batch Settle received, in order.
func (r *SettleRecorder) Batches() [][]store.Settlement {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// Of is every settlement Settle received for task id, in order.
func (r *SettleRecorder) Of(id string) []store.Settlement {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Settlement
	for _, b := range r.batches {
		for _, s := range b {
			if s.TaskID == id {
				out = append(out, s)
			}
		}
	}
	return out
}
