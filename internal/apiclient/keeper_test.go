package apiclient_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestKeeperKeepsTheLease: heartbeats push the lease's expiry on, so the
// report context outlives the claim's lease; an operator's cancel is passed
// on once; a lease settled elsewhere is reported lost and heartbeats stop.
func TestKeeperKeepsTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	claimed := time.Now()
	l := e.claim(t, 1)
	var canceled, lost atomic.Int32
	lostErr := make(chan error, 1)
	k := e.cl.KeepLease(l, claimed, apiclient.KeepOptions{Lease: 3 * time.Second, WorkerID: "w1",
		OnCancelRequested: func() { canceled.Add(1) },
		OnLost:            func(err error) { lost.Add(1); lostErr <- err },
	})
	defer k.Stop()
	first := k.Until()
	if !first.Equal(claimed.Add(3 * time.Second).UTC()) {
		t.Fatalf("Until %s, want the claim's time + lease", first)
	}
	ctx, cancel := k.ReportContext(0)
	defer cancel()
	testwait.For(t, "the claim's lease has run out by the clock", func() bool { return time.Now().After(first.Add(100 * time.Millisecond)) })
	if ctx.Err() != nil || !k.Until().After(first) {
		t.Fatalf("heartbeats did not keep the lease: until %s, report context %v", k.Until(), context.Cause(ctx))
	}

	if _, err := e.cl.Cancel(context.Background(), l.TaskID); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the cancel reaches the keeper", func() bool { return canceled.Load() > 0 })

	// Settled elsewhere: the heartbeat's 409 is the lease lost.
	if _, err := e.cl.Fail(context.Background(), l.TaskID, api.FailRequest{LeaseToken: l.Token, Outcome: bt.OutcomeTransientError}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lostErr:
		if apiclient.StatusOf(err) != http.StatusConflict || !k.Lost() {
			t.Fatalf("lost with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the keeper never saw the lease lost")
	}
	k.Stop()
	if canceled.Load() != 1 || lost.Load() != 1 {
		t.Fatalf("callbacks: canceled %d, lost %d; want once each", canceled.Load(), lost.Load())
	}
}

// TestKeeperReportContextEndsAtExpiry: with every heartbeat failing, the
// report context ends once the lease's expiry has passed (not before the
// floor), with ErrLeaseExpired as its cause.
func TestKeeperReportContextEndsAtExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.claim(t, 1)
	e.f.setRule(func(r *http.Request, n int) action {
		if strings.HasSuffix(r.URL.Path, "/heartbeat") {
			return unavail
		}
		return pass
	})
	var fails atomic.Int32
	claimed := time.Now()
	k := e.cl.KeepLease(l, claimed, apiclient.KeepOptions{Lease: time.Second,
		OnError: func(err error, wait time.Duration, keptUntil time.Time) {
			if apiclient.StatusOf(err) == http.StatusServiceUnavailable && wait <= time.Second/3 && keptUntil.Equal(claimed.Add(time.Second).UTC()) {
				fails.Add(1)
			}
		},
	})
	defer k.Stop()
	started := time.Now()
	ctx, cancel := k.ReportContext(1500 * time.Millisecond)
	defer cancel()
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("the report context outlived an expired lease")
	}
	if !errors.Is(context.Cause(ctx), apiclient.ErrLeaseExpired) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
	if time.Since(started) < 1500*time.Millisecond {
		t.Fatal("the report context ended before its floor")
	}
	if fails.Load() == 0 || k.Lost() {
		t.Fatalf("failed heartbeats seen: %d, lost %v", fails.Load(), k.Lost())
	}
}
