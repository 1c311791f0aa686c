package storetest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// BenchDrain measures the store alone on the engine's hot path: b.N tasks
// are inserted in batches, then claimers claim a batch, settle it as
// succeeded (recording the execution) and repeat until the queue is empty.
// Only the drain is timed. BACKSTOP_BENCH_BATCH (default 100) and
// BACKSTOP_BENCH_CLAIMERS (default 4) change the load, BACKSTOP_BENCH_PAYLOAD
// the tasks' payload (default {}); BACKSTOP_BENCH_LIMIT=N puts a concurrency
// limit of N on the queue and claims through it (the limited claim);
// BACKSTOP_BENCH_RATE=R a rate limit of R starts a second with a burst of
// R (the claims' time is fixed: with R at least b.N it never binds);
// BACKSTOP_BENCH_TENANTS=N spreads the tasks over N values of a tenant
// attribute in turn, and with it the claims run at real time (a fair
// queue's one-value mark lasts store.FairOneValueFor of it);
// BACKSTOP_BENCH_FAIR=1 makes the queue fair by tenant and claims through
// it (the fair claim).
// Besides tasks/s it reports the mean time of a claim (claim-ms).
func BenchDrain(b *testing.B, s store.Store) {
	ctx := context.Background()
	batch, claimers := envInt("BACKSTOP_BENCH_BATCH", 100), envInt("BACKSTOP_BENCH_CLAIMERS", 4)
	queue := "bench-" + uuid.NewString()[:8]
	now := time.Now().UTC().Truncate(time.Microsecond)
	n := b.N
	payload := json.RawMessage(cmp.Or(os.Getenv("BACKSTOP_BENCH_PAYLOAD"), `{}`))
	tenants, fair := envInt("BACKSTOP_BENCH_TENANTS", 0), os.Getenv("BACKSTOP_BENCH_FAIR") == "1"
	enqueueStart := time.Now()
	for start := 0; start < n; start += 5000 {
		chunk := make([]*bt.Task, 0, 5000)
		for i := start; i < min(start+5000, n); i++ {
			id, _ := uuid.NewV7()
			task := &bt.Task{ID: id.String(), Queue: queue, Kind: "noop", State: bt.StatePending,
				MaxAttempts: 25, Payload: payload, RunAt: now, CreatedAt: now, UpdatedAt: now}
			if tenants > 0 {
				task.Attributes = map[string]string{"tenant": strconv.Itoa(i % tenants)}
			}
			chunk = append(chunk, task)
		}
		if _, err := s.Enqueue(ctx, chunk, store.EnqueueOpts{}); err != nil {
			b.Fatal(err)
		}
	}
	// The set-up's enqueue, outside the timer: what an index of waiting
	// tasks costs shows here (enqueued/s), not in the drain.
	enqueued := float64(n) / time.Since(enqueueStart).Seconds()
	limited := false
	if n := envInt("BACKSTOP_BENCH_LIMIT", 0); n > 0 {
		if err := s.SetLimit(ctx, store.Limit{Name: queue, Queue: queue, Concurrency: n, CreatedAt: now}, bt.Event{}); err != nil {
			b.Fatal(err)
		}
		limited = true
	}
	if r := envInt("BACKSTOP_BENCH_RATE", 0); r > 0 {
		if err := s.SetLimit(ctx, store.Limit{Name: queue + "-rate", Queue: queue, Rate: float64(r), Burst: r, CreatedAt: now}, bt.Event{}); err != nil {
			b.Fatal(err)
		}
		limited = true
	}
	if fair {
		if err := s.SetFair(ctx, store.FairQueue{Queue: queue, By: "tenant", CreatedAt: now}, bt.Event{}); err != nil {
			b.Fatal(err)
		}
	}
	claimNow := func() time.Time {
		if tenants > 0 {
			return time.Now().UTC()
		}
		return now
	}
	var claims, claimNanos, settleNanos atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range claimers {
		wg.Go(func() {
			for {
				t0 := time.Now()
				got, err := s.Claim(ctx, store.ClaimParams{Queue: queue, WorkerID: fmt.Sprint("bench-", w), Max: batch, Now: claimNow(),
					Lease: time.Minute, Limited: limited, Fair: fair})
				claims.Add(1)
				claimNanos.Add(int64(time.Since(t0)))
				if err != nil {
					b.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				st := make([]store.Settlement, len(got))
				for i, task := range got {
					st[i] = store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: bt.OutcomeSucceeded,
						FinishedAt: now, State: bt.StateSucceeded}
				}
				t1 := time.Now()
				_, err = s.Settle(ctx, st)
				settleNanos.Add(int64(time.Since(t1)))
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "tasks/s")
	b.ReportMetric(enqueued, "enqueued/s")
	b.ReportMetric(float64(claimNanos.Load())/float64(max(claims.Load(), 1))/1e6, "claim-ms")
	b.ReportMetric(float64(claims.Load()), "claims")
	b.ReportMetric(float64(settleNanos.Load())/float64(max(claims.Load(), 1))/1e6, "settle-ms")
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
