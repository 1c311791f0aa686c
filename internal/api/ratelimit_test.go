package api_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// TestRateLimitWorkerBudget: producers that exhaust a token's budget do not
// throttle the worker protocol on the same token. Claims and log appends
// spend a budget of their own; heartbeats and settlements (which name a
// lease a claim handed out) are never limited, because a refused heartbeat
// or report lets the lease expire and charges an attempt whose program may
// have succeeded (issue 13).
func TestRateLimitWorkerBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, testdbSQLite(t), setupOpts{rateLimit: 1}) // 1/s, burst 2
	ctx := context.Background()
	op := b.as[api.RoleOperator]
	for i := range 3 {
		if _, err := b.lib.Enqueue(ctx, backstop.EnqueueParams{Queue: "q", Kind: "k", Payload: []byte(`{}`),
			MaxAttempts: 1, IdempotencyKey: strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// The producers' side of the token is spent.
	limited := false
	for range 5 {
		if _, err := op.Queues(ctx); apiclient.StatusOf(err) == http.StatusTooManyRequests {
			limited = true
		}
	}
	if !limited {
		t.Fatal("5 reads at 1/s (burst 2) were not limited")
	}
	// The worker's claims still get through: their own budget.
	ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"q"}, WorkerID: "w", Max: 3})
	if err != nil || len(ts) != 3 {
		t.Fatalf("claim with the producers' budget spent: %v %v", ts, err)
	}
	// Heartbeats and settlements are never limited.
	for i := range 20 {
		if _, err := op.Heartbeat(ctx, ts[0].ID, api.HeartbeatRequest{LeaseToken: ts[0].LeaseToken}); err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
	}
	if _, err := op.Complete(ctx, ts[0].ID, api.CompleteRequest{LeaseToken: ts[0].LeaseToken}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if _, err := op.Fail(ctx, ts[1].ID, api.FailRequest{LeaseToken: ts[1].LeaseToken, Outcome: bt.OutcomePermanentError}); err != nil {
		t.Fatalf("fail: %v", err)
	}
	if _, err := op.Release(ctx, ts[2].ID, api.ReleaseRequest{LeaseToken: ts[2].LeaseToken}); err != nil {
		t.Fatalf("release: %v", err)
	}
	// The worker budget is a budget: claims past it are limited too, and
	// that does not spend the producers' (nor the reverse).
	limited = false
	for range 5 {
		if _, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"q"}, WorkerID: "w"}); apiclient.StatusOf(err) == http.StatusTooManyRequests {
			limited = true
		}
	}
	if !limited {
		t.Fatal("5 claims at 1/s (burst 2) were not limited")
	}
	// A draining worker's claim stops are never limited either, with
	// both budgets spent: a refused stop cuts the claim off with its
	// answer, and the tasks it took wait out their leases.
	for i := range 20 {
		if _, err := op.StopClaim(ctx, "drain-"+strconv.Itoa(i)); err != nil {
			t.Fatalf("claim stop %d: %v", i, err)
		}
	}
}

// TestRateLimitRetryAfter: a 429 says, in whole seconds, when the token's
// budget has a request again.
func TestRateLimitRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, testdbSQLite(t), setupOpts{rateLimit: 0.1}) // one request per 10s, burst 1
	ctx := context.Background()
	v := b.as[api.RoleViewer]
	if _, err := v.Queues(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := v.Queues(ctx)
	var p *api.Problem
	if !errors.As(err, &p) || p.Status != http.StatusTooManyRequests {
		t.Fatalf("second request: %v", err)
	}
	// The budget refills in 10s less the time since the first request.
	if p.RetryAfter < 2*time.Second || p.RetryAfter > 10*time.Second {
		t.Fatalf("Retry-After %s, want the time until the budget refills (up to 10s)", p.RetryAfter)
	}
}
