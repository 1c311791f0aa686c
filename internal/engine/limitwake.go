package engine

import (
	"context"
	"time"
)

// NextTokenWait is how long a worker whose claim of queue came back short
// waits before claiming again because of a rate limit: until the first of
// the queue's short rate budgets holds a whole token again, at most limit (and at least a millisecond).
// ok is false when no rate budget of the queue is short (the worker waits
// for a wake-up or its poll as usual). So a rate of 50 a second is held by
// claims 20 ms apart, not one poll interval's burst. A queue without rate
// limits (none, or only concurrency limits, in the claim settings'
// snapshot) is answered without reading the store.
func (e *Engine) NextTokenWait(ctx context.Context, queue string, limit time.Duration) (wait time.Duration, ok bool) {
	if !e.settings(ctx).rated(queue) {
		return 0, false
	}
	now := e.Now()
	due, err := e.store.NextToken(ctx, queue, now)
	if err != nil || due.IsZero() {
		return 0, false
	}
	return min(limit, max(due.Sub(now), time.Millisecond)), true
}
