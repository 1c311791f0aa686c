package engine

import (
	"context"
	"sync"
	"time"

	"github.com/backstophq/backstop/store"
)

// FairQueue makes claims in a queue rotate across the values of an
// attribute (store/fair.go, docs/fairness.md).
type FairQueue = store.FairQueue

// MaxFairWeight bounds a value's weight.
const MaxFairWeight = 1000

// ValidateFair checks a fair queue before it is stored; the error names
// the field.
func ValidateFair(f FairQueue) error {
	if err := ValidName(f.Queue); err != nil {
		return Invalid("queue", "%v", err)
	}
	if !ValidAttrKey(f.By) {
		return Invalid("by", "%q must be an attribute key: 1-64 characters of letters, digits, '_', '.' or '-', starting with a letter or '_'", f.By)
	}
	for v, w := range f.Weights {
		if w < 1 || w > MaxFairWeight {
			return Invalid("weights", "%s=%d: want a whole number from 1 to %d", v, w, MaxFairWeight)
		}
		if err := CheckText("weights", v); err != nil {
			return err
		}
	}
	return nil
}

// fairQueues caches which queues are fair, reread every LimitsRefresh
// (real time, like the limits' cache).
type fairQueues struct {
	mu     sync.Mutex
	read   time.Time // zero: read on the next claim
	queues map[string]bool
}

// fair tells whether queue is fair: the claim then takes the fair path.
// When fairness cannot be read it says yes (the fair claim reads it again,
// in its transaction, and claims as usual when the queue is not fair).
func (e *Engine) fair(ctx context.Context, queue string) bool {
	c := &e.fairQueues
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.read.IsZero() || time.Since(c.read) >= LimitsRefresh {
		fs, err := e.store.ListFair(ctx)
		if err != nil {
			return true
		}
		c.queues = map[string]bool{}
		for _, f := range fs {
			c.queues[f.Queue] = true
		}
		c.read = time.Now()
	}
	return c.queues[queue]
}

// FairChanged makes the next claim reread which queues are fair.
func (e *Engine) FairChanged() {
	e.fairQueues.mu.Lock()
	e.fairQueues.read = time.Time{}
	e.fairQueues.mu.Unlock()
}
