package engine

import (
	"context"
	"time"
)

// NextTokenWait is how long a worker whose claim of queue, begun at at
// (the engine's clock), came back short waits before claiming again
// because of a rate limit: until the first of the queue's rate budgets
// that was short at the claim's time holds a whole token again, at most
// limit and at least a millisecond (a token that came while the worker was
// slow to ask means claim again now, not "no budget is short": the claim
// was cut short all the same). ok is false when no rate budget of the
// queue was short (the worker waits for a wake-up or its poll as usual).
// So a rate of 50 a second is held by claims 20 ms apart, not one poll
// interval's burst. A queue without rate limits (none, or only concurrency
// limits, in the claim settings' snapshot) is answered without reading the
// store.
func (e *Engine) NextTokenWait(ctx context.Context, queue string, at time.Time, limit time.Duration) (wait time.Duration, ok bool) {
	if !e.settings(ctx).rated(queue) {
		return 0, false
	}
	due, err := e.store.NextToken(ctx, queue, at)
	if err != nil || due.IsZero() {
		return 0, false
	}
	return min(limit, max(due.Sub(e.Now()), time.Millisecond)), true
}
