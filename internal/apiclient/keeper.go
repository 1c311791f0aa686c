package apiclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// KeepOptions configures KeepLease. Callbacks run on the keeper's
// goroutine; keep them short.
type KeepOptions struct {
	// Lease is the lease asked for at the claim; each heartbeat extends it
	// by as much, every Lease/3. Required (1s to 1h).
	Lease time.Duration
	// WorkerID, when set, goes with each heartbeat (the registry's
	// last seen).
	WorkerID string
	// Progress, when set, is asked before each heartbeat for the
	// progress to send with it (nil: none).
	Progress func() *bt.Progress
	// OnCancelRequested is called once when a heartbeat says an operator
	// canceled the task: stop the work and report.
	OnCancelRequested func()
	// OnLost is called once when the server answers 409 or 404 to a
	// heartbeat; heartbeats stop. Before a report was sent the lease is
	// lost (stop the work, do not report); after, the report may be what
	// settled it: the Report methods tell which.
	OnLost func(err error)
	// OnError is called for each other failed heartbeat, with the wait
	// before the next try (backoff, or the server's Retry-After, at most
	// Lease/3) and the lease's expiry as last extended (Until).
	OnError func(err error, wait time.Duration, keptUntil time.Time)
}

// Keeper heartbeats one lease from the claim until Stop, the whole time a
// worker holds it: while the work runs and while its report is retried.
type Keeper struct {
	c       *Client
	l       Lease
	o       KeepOptions
	expires atomic.Int64 // unix ns: the lease's expiry as last extended
	lost    atomic.Bool
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// KeepLease starts heartbeating l, claimed at claimedAt (the time the claim
// was sent, or earlier: the lease's expiry is reckoned from it).
func (c *Client) KeepLease(l Lease, claimedAt time.Time, o KeepOptions) *Keeper {
	k := &Keeper{c: c, l: l, o: o, stop: make(chan struct{}), done: make(chan struct{})}
	k.expires.Store(claimedAt.Add(o.Lease).UnixNano())
	go k.beat()
	return k
}

// Until is the lease's expiry as the last successful heartbeat set it (by
// this process's clock, from the time that heartbeat was sent).
func (k *Keeper) Until() time.Time { return time.Unix(0, k.expires.Load()).UTC() }

// Lost reports whether a heartbeat was answered 409 or 404.
func (k *Keeper) Lost() bool { return k.lost.Load() }

// Stop ends the heartbeats and waits for the keeper's goroutine.
func (k *Keeper) Stop() {
	k.once.Do(func() { close(k.stop) })
	<-k.done
}

// ErrLeaseExpired is the cause of a ReportContext that ended because the
// lease's expiry passed with no successful heartbeat.
var ErrLeaseExpired = errors.New("the lease expired with no successful heartbeat")

// ReportContext is a context for the report of the attempt: it ends (with
// cause ErrLeaseExpired) once the lease's expiry has passed with no
// successful heartbeat to push it back, but not before floor from now
// (only the server knows whether its maintenance settled an expired lease
// yet). Call cancel when the report is done.
func (k *Keeper) ReportContext(floor time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	not := time.Now().Add(floor)
	go func() {
		for {
			until := k.Until()
			at := until
			if not.After(at) {
				at = not
			}
			d := time.Until(at)
			if d <= 0 {
				cancel(fmt.Errorf("%w (it expired at %s)", ErrLeaseExpired, until.Format(time.RFC3339Nano)))
				return
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

func (k *Keeper) beat() {
	defer close(k.done)
	every := k.o.Lease / 3
	backoff := &Retry{Max: every}
	fails, wait := 0, every
	canceled := false
	for {
		t := time.NewTimer(wait)
		select {
		case <-k.stop:
			t.Stop()
			return
		case <-t.C:
		}
		sent := time.Now()
		// A slow answer is still worth waiting for while the lease holds.
		ctx, cancel := context.WithTimeout(context.Background(), max(every, time.Until(k.Until())))
		req := api.HeartbeatRequest{LeaseToken: k.l.Token, Lease: bt.Duration(k.o.Lease), WorkerID: k.o.WorkerID}
		if k.o.Progress != nil {
			req.Progress = k.o.Progress()
		}
		res, err := k.c.Heartbeat(ctx, k.l.TaskID, req)
		cancel()
		switch s := StatusOf(err); {
		case err == nil:
			k.expires.Store(sent.Add(k.o.Lease).UnixNano())
			fails, wait = 0, every
			if res.CancelRequested && !canceled && k.o.OnCancelRequested != nil {
				canceled = true
				k.o.OnCancelRequested()
			}
			continue
		case s == http.StatusConflict || s == http.StatusNotFound:
			k.lost.Store(true)
			if k.o.OnLost != nil {
				k.o.OnLost(err)
			}
			return
		}
		_, after := Retryable(err)
		wait = min(max(backoff.Backoff(fails), after), every)
		fails++
		if k.o.OnError != nil {
			k.o.OnError(err, wait, k.Until())
		}
	}
}
