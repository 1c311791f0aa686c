package engine

import (
	"context"
	"sync"
	"time"

	"github.com/backstophq/backstop/store"
)

// coalescer gathers requests that arrive concurrently into batches, one
// flush (one transaction) per batch: the settle batcher (settle.go) and the
// enqueue batcher (enqueue.go). The first caller to find it idle flushes
// while later callers queue, then flushes what queued meanwhile, until its
// own requests are written; if others are still waiting then, a goroutine
// takes over the flushing until nothing is pending, so no caller waits on
// work that is not its own. A caller alone is written at once, with no
// added wait. Its zero value is ready.
type coalescer[R comparable] struct {
	mu       sync.Mutex
	pending  []R
	flushing bool
}

// submit queues reqs and flushes if no flush is under way: take removes the
// next batch from the pending requests (pending holds at least one), flush
// writes a batch and completes its requests. When submit returns, the
// caller's requests are written or in another flusher's hands; callers wait
// on their own requests' completion.
func (c *coalescer[R]) submit(reqs []R, take func(pending []R) (batch, rest []R), flush func(batch []R)) {
	c.mu.Lock()
	c.pending = append(c.pending, reqs...)
	if c.flushing {
		c.mu.Unlock()
		return
	}
	c.flushing = true
	mine := make(map[R]bool, len(reqs))
	for _, r := range reqs {
		mine[r] = true
	}
	c.flushUntil(take, flush, mine)
}

// flushUntil flushes batches (mu held, flushing set) until mine are all
// written or nothing is pending, then hands what is left to a goroutine.
func (c *coalescer[R]) flushUntil(take func([]R) ([]R, []R), flush func([]R), mine map[R]bool) {
	for len(c.pending) > 0 && (mine == nil || len(mine) > 0) {
		batch, rest := take(c.pending)
		c.pending = rest
		c.mu.Unlock()
		flush(batch)
		for _, r := range batch {
			delete(mine, r)
		}
		c.mu.Lock()
	}
	if len(c.pending) > 0 {
		c.mu.Unlock()
		go func() {
			c.mu.Lock()
			c.flushUntil(take, flush, nil)
		}()
		return
	}
	c.flushing = false
	c.mu.Unlock()
}

// batchContext is the context a coalesced batch is written under: the
// first caller's values and actor, without its cancellation (the batch
// carries other callers' requests: the first caller going away must not
// cut them off), bounded.
func batchContext(ctx context.Context, actor string) (context.Context, context.CancelFunc) {
	return context.WithTimeout(store.WithActor(context.WithoutCancel(ctx), actor), 30*time.Second)
}
