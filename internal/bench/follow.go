package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop"
)

// FollowResult is how far a follower of the event log's `all` stream stayed
// behind the engine during a run: for each event of the run's queue, the
// time from the event (the engine's clock at the change) to its delivery.
// task.started is left out: it is stamped with the attempt's start and
// written when the attempt settles (docs/events.md), so its "lag" is the
// task's run time, not the log's.
type FollowResult struct {
	Events        int           // events of the run's queue delivered
	Succeeded     int           // of which task.succeeded
	P50, P99, Max time.Duration // delivery lag
}

func (r FollowResult) String() string {
	return fmt.Sprintf("follow: stream=all events=%d succeeded=%d lag_p50=%s lag_p99=%s lag_max=%s",
		r.Events, r.Succeeded, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond))
}

// Follower subscribes to `all` from the log's current end and measures the
// lag of the events of one queue.
type Follower struct {
	sub   *backstop.Subscription
	queue string
	lags  []time.Duration
	succ  atomic.Int64 // task.succeeded delivered (read while run goes)
	n     int
	done  chan struct{}
}

// StartFollower starts following. The log's current end is found first, so
// earlier events (other runs) are not counted.
func StartFollower(ctx context.Context, c *backstop.Client, queue string) (*Follower, error) {
	after := ""
	for {
		p, err := c.ReadEvents(ctx, backstop.ReadEventsParams{After: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("bench: follow: %w", err)
		}
		after = p.Next
		if len(p.Events) < 1000 {
			break
		}
	}
	sub, err := c.Subscribe(ctx, backstop.SubscribeParams{
		ReadEventsParams: backstop.ReadEventsParams{After: after, Limit: 1000},
		PollInterval:     10 * time.Millisecond, Buffer: 10_000,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: follow: %w", err)
	}
	f := &Follower{sub: sub, queue: queue, done: make(chan struct{})}
	go f.run()
	return f, nil
}

func (f *Follower) run() {
	defer close(f.done)
	for e := range f.sub.C {
		if e.Queue != f.queue {
			continue
		}
		f.n++
		switch e.Type {
		case "task.started":
			continue
		case "task.succeeded":
			f.succ.Add(1)
		}
		f.lags = append(f.lags, time.Since(e.Time))
	}
}

// Stop waits until the follower has delivered want task.succeeded events
// of the queue (or wait passed), stops it and returns the figures.
func (f *Follower) Stop(want int, wait time.Duration) (FollowResult, error) {
	deadline := time.Now().Add(wait)
	for {
		time.Sleep(20 * time.Millisecond)
		if time.Now().After(deadline) || f.succ.Load() >= int64(want) {
			break
		}
	}
	f.sub.Close()
	<-f.done
	r := FollowResult{Events: f.n, Succeeded: int(f.succ.Load())}
	if len(f.lags) > 0 {
		slices.Sort(f.lags)
		r.P50 = f.lags[len(f.lags)/2]
		r.P99 = f.lags[len(f.lags)*99/100]
		r.Max = f.lags[len(f.lags)-1]
	}
	if r.Succeeded < want {
		return r, fmt.Errorf("bench: follow: the follower delivered %d of %d task.succeeded events within %s", r.Succeeded, want, wait)
	}
	return r, f.sub.Err()
}
