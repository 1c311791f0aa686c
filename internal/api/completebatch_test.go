package api_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// TestCompleteBatch: many completions in one request, each answered on
// its own: current leases succeed, a stale or unknown one is refused
// (nothing changes for it), a bad item is invalid_input.
func TestCompleteBatch(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		for range 3 {
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "cb", Kind: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"cb"}, WorkerID: "w", Max: 3})
		if err != nil || len(ts) != 3 {
			t.Fatalf("claim: %v %v", ts, err)
		}
		res, err := op.CompleteMany(ctx, []api.CompletionItem{
			{TaskID: ts[0].ID, LeaseToken: ts[0].LeaseToken},
			{TaskID: ts[1].ID, LeaseToken: "stale"},
			{TaskID: ts[2].ID, LeaseToken: ts[2].LeaseToken, Progress: &bt.Progress{Total: 2, Completed: 2}},
			{TaskID: "nope", LeaseToken: "x"},
			{TaskID: "", LeaseToken: ""},
		})
		if err != nil || len(res.Results) != 5 {
			t.Fatalf("complete batch: %+v %v", res, err)
		}
		want := []string{"succeeded", "lease_not_current", "succeeded", "not_found", "invalid_input"}
		for i, r := range res.Results {
			got := ""
			switch {
			case r.Result != nil && r.Problem == nil:
				got = string(r.Result.State)
			case r.Problem != nil && r.Result == nil:
				got = r.Problem.Code
			}
			if got != want[i] {
				t.Errorf("item %d: %+v %+v, want %s", i, r.Result, r.Problem, want[i])
			}
		}
		if v, _ := b.lib.Get(ctx, ts[1].ID); v.State != backstop.StateRunning {
			t.Errorf("the stale item's task: %s, want still running", v.State)
		}
		if v, _ := b.lib.Get(ctx, ts[2].ID); v.Progress.Completed != 2 {
			t.Errorf("progress not stored: %+v", v.Progress)
		}
		_, err = op.CompleteMany(ctx, nil)
		mustCode(t, err, "invalid_input")
		_, err = op.CompleteMany(ctx, make([]api.CompletionItem, api.MaxCompleteBatch+1))
		mustCode(t, err, "too_large")
	})
}

// BenchmarkRemoteRoundTripBatch: as BenchmarkRemoteRoundTrip, but each
// worker reports its claimed tasks in one POST /v1/tasks/complete.
func BenchmarkRemoteRoundTripBatch(b *testing.B) {
	bb := setup(b, testdbSQLite2(b), setupOpts{rateLimit: -1})
	ctx := context.Background()
	params := make([]backstop.EnqueueParams, 0, 1000)
	for left := b.N; left > 0; left -= len(params) {
		params = params[:0]
		for range min(left, 1000) {
			params = append(params, backstop.EnqueueParams{Queue: "bench", Kind: "noop"})
		}
		if _, err := bb.lib.EnqueueMany(ctx, params); err != nil {
			b.Fatal(err)
		}
	}
	c := benchClient(bb, api.RoleOperator)
	var mu sync.Mutex
	done := 0
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for {
				ts, err := c.Claim(ctx, api.ClaimRequest{Queues: []string{"bench"}, WorkerID: "bench-" + string(rune('a'+w)), Max: 10})
				if err != nil {
					b.Error(err)
					return
				}
				if len(ts) == 0 {
					return
				}
				items := make([]api.CompletionItem, len(ts))
				for i, t := range ts {
					items[i] = api.CompletionItem{TaskID: t.ID, LeaseToken: t.LeaseToken}
				}
				res, err := c.CompleteMany(ctx, items)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				for _, r := range res.Results {
					if r.Result != nil {
						done++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(done)/time.Since(start).Seconds(), "tasks/s")
	b.ReportMetric(peakRSSMiB(), "peak-RSS-MiB")
	if done != b.N {
		b.Fatalf("completed %d of %d", done, b.N)
	}
}
