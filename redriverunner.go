package backstop

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/store"
)

// A running redrive has a runner: the process running it records its name
// and a heartbeat on the redrive's record every Config.RedriveHeartbeat,
// and clears its name when it stops. ResumeRedrive (and a Redrive that
// would resume the same redrive) refuses one whose runner was seen less
// than RedriveStaleAfter ago, unless forced: two processes never run one
// redrive at once by mistake. A runner that finds another took its
// redrive over (a forced resume) stops after its batch.

// RedriveStaleAfter: a runner not seen for this long is presumed gone
// (three heartbeats).
func (c *Client) RedriveStaleAfter() time.Duration { return 3 * c.cfg.RedriveHeartbeat }

// RunnerAlive reports whether rec's runner was seen within
// RedriveStaleAfter of now, and how long ago a runner was last seen (since
// the redrive started when none ever was).
func (c *Client) RunnerAlive(rec store.Redrive, now time.Time) (alive bool, lastSeen time.Duration) {
	at := rec.StartedAt
	if rec.HeartbeatAt != nil {
		at = *rec.HeartbeatAt
	}
	lastSeen = max(0, now.Sub(at))
	return rec.Runner != "" && rec.HeartbeatAt != nil && lastSeen < c.RedriveStaleAfter(), lastSeen
}

func newRunnerID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8])
}

// claimRedrive makes runner the redrive's runner, or says who runs it.
func (c *Client) claimRedrive(ctx context.Context, id, runner string, force bool) error {
	now := c.now()
	rec, ok, err := c.store.ClaimRedrive(ctx, store.RedriveClaim{ID: id, Runner: runner, At: now,
		StaleBefore: now.Add(-c.RedriveStaleAfter()), Force: force})
	if err != nil {
		return fmt.Errorf("redrive %s: %w", id, err)
	}
	if ok {
		return nil
	}
	_, seen := c.RunnerAlive(rec, now)
	return fmt.Errorf("%w: redrive %s is running in another process (runner %s, last seen %s ago; a runner not seen for %s is presumed gone): "+
		"wait for it, cancel it (backstop redrives cancel %s), or once sure its process is gone take it over (backstop redrives resume %s --force)",
		ErrConflict, id, rec.Runner, seen.Round(time.Millisecond), c.RedriveStaleAfter(), id, id)
}

// beatRedrive records runner's heartbeat on the redrive every
// Config.RedriveHeartbeat until the returned stop is called; stop also
// clears the runner's name from the record.
func (c *Client) beatRedrive(ctx context.Context, id, runner string) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(c.cfg.RedriveHeartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := c.now()
			_, ok, err := c.store.ClaimRedrive(ctx, store.RedriveClaim{ID: id, Runner: runner, At: now, Renew: true})
			if err == nil && !ok {
				return // taken over: the run sees it after its batch
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		rctx, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = c.store.ReleaseRedrive(rctx, id, runner)
	}
}
