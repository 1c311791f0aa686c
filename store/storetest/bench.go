package storetest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
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
// R (the claims' time is fixed: with R at least b.N it never binds).
func BenchDrain(b *testing.B, s store.Store) {
	ctx := context.Background()
	batch, claimers := envInt("BACKSTOP_BENCH_BATCH", 100), envInt("BACKSTOP_BENCH_CLAIMERS", 4)
	queue := "bench-" + uuid.NewString()[:8]
	now := time.Now().UTC().Truncate(time.Microsecond)
	n := b.N
	payload := json.RawMessage(cmp.Or(os.Getenv("BACKSTOP_BENCH_PAYLOAD"), `{}`))
	enqueueStart := time.Now()
	for start := 0; start < n; start += 5000 {
		chunk := make([]*bt.Task, 0, 5000)
		for i := start; i < min(start+5000, n); i++ {
			id, _ := uuid.NewV7()
			chunk = append(chunk, &bt.Task{ID: id.String(), Queue: queue, Kind: "noop", State: bt.StatePending,
				MaxAttempts: 25, Payload: payload, RunAt: now, CreatedAt: now, UpdatedAt: now})
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
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range claimers {
		wg.Go(func() {
			for {
				got, err := s.Claim(ctx, store.ClaimParams{Queue: queue, WorkerID: fmt.Sprint("bench-", w), Max: batch, Now: now, Lease: time.Minute, Limited: limited})
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
				if _, err := s.Settle(ctx, st); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "tasks/s")
	b.ReportMetric(enqueued, "enqueued/s")
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
