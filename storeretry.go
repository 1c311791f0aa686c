package backstop

import (
	"context"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

// The backoff between tries while the store is unavailable.
const (
	storeRetryFirst = 100 * time.Millisecond
	storeRetryMax   = 5 * time.Second
)

// waitOutUnavailable runs op, and runs it again while it fails because
// the store is temporarily unavailable (store.Classify), with a doubling
// backoff, for at most Config.StoreRetry in all. Before each new try it
// calls resync (if not nil), which re-reads what the failed try may or
// may not have committed; resync failing for the same reason counts as a
// failed try. Any other error, and ctx's end, return at once. op must be
// safe to run again: each of its writes is a transaction that either
// committed (resync sees it) or did not.
func (c *Client) waitOutUnavailable(ctx context.Context, what string, op, resync func() error) error {
	err := op()
	if c.cfg.StoreRetry < 0 {
		return err
	}
	deadline := time.Now().Add(c.cfg.StoreRetry)
	wait := storeRetryFirst
	for tries := 1; err != nil && store.IsUnavailable(err) && ctx.Err() == nil; tries++ {
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%s: the store stayed unavailable for %s (%d tries): %w", what, c.cfg.StoreRetry, tries, store.Classify(err))
		}
		c.cfg.Logger.Warn("store unavailable; trying again", "what", what, "in", wait, "try", tries, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, storeRetryMax)
		if resync != nil {
			if err = resync(); err != nil {
				continue
			}
		}
		err = op()
	}
	return err
}
