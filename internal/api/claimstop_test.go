package api_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// TestClaimStop: POST /v1/claims/{claim_id}/stop ends a named claim's wait
// at once (held), and a stop that comes before its claim (the claim's
// request overtaken) makes that claim answer at once with no tasks, leasing
// nothing; a bad claim id is refused naming claim_id.
func TestClaimStop(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		waiting := claimWaits(b)

		type result struct {
			ts  []api.ClaimedTask
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		go func() {
			ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"cs"}, WorkerID: "w", ClaimID: "claim-1",
				Wait: bt.Duration(20 * time.Second)})
			got <- result{ts, err, time.Now()}
		}()
		<-waiting
		stopped := time.Now()
		res, err := op.StopClaim(ctx, "claim-1")
		if err != nil || !res.Held {
			t.Fatalf("stop of a waiting claim: %+v %v, want held", res, err)
		}
		r := <-got
		if r.err != nil || len(r.ts) != 0 || r.at.Sub(stopped) > 3*time.Second {
			t.Fatalf("stopped claim: %v %v after %s, want no tasks at once", r.ts, r.err, r.at.Sub(stopped))
		}
		// The claim answered: a second stop does not find it.
		if res, err := op.StopClaim(ctx, "claim-1"); err != nil || res.Held {
			t.Fatalf("stop of an answered claim: %+v %v, want not held", res, err)
		}

		// A stop first: the claim named by it leases nothing, though a
		// task is claimable, and does not wait.
		if res, err := op.StopClaim(ctx, "claim-2"); err != nil || res.Held {
			t.Fatalf("stop before its claim: %+v %v, want not held", res, err)
		}
		e, err := op.Enqueue(ctx, apiclient.Task{Queue: "cs", Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"cs"}, WorkerID: "w", ClaimID: "claim-2",
			Wait: bt.Duration(20 * time.Second)})
		if err != nil || len(ts) != 0 || time.Since(start) > 3*time.Second {
			t.Fatalf("claim stopped before it came: %v %v after %s, want no tasks at once", ts, err, time.Since(start))
		}
		if v, err := op.Get(ctx, e.Task.ID); err != nil || v.State != bt.StatePending || v.Attempt != 0 {
			t.Fatalf("the task after a stopped claim: %+v %v, want pending, attempt 0", v, err)
		}
		// The stop is used up: the same id again claims as usual.
		if ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"cs"}, WorkerID: "w", ClaimID: "claim-2"}); err != nil || len(ts) != 1 {
			t.Fatalf("claim after the stop was used: %v %v, want the task", ts, err)
		}

		// Bad ids.
		var p *api.Problem
		long := strings.Repeat("x", 129)
		if _, err := op.StopClaim(ctx, long); !errors.As(err, &p) || p.Status != 400 || p.Field != "claim_id" {
			t.Fatalf("stop with a 129-character id: %v", err)
		}
		if _, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"cs"}, WorkerID: "w", ClaimID: "a b"}); !errors.As(err, &p) || p.Status != 400 || p.Field != "claim_id" {
			t.Fatalf("claim with claim_id %q: %v", "a b", err)
		}
	})
}
