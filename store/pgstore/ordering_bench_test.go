package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// BenchmarkOrderedDrain measures how fast clients drain an ordered queue on
// Postgres: b.N tasks over BACKSTOP_BENCH_KEYS keys (default 1000), in
// sequence (no gaps), drained by 1 and by 4 clients, each with its own
// pool (as separate processes would be), each ordering the queue before
// every claim of up to BACKSTOP_BENCH_BATCH tasks (default 100), as a
// worker does. Order is serialised per queue (an advisory lock), so the
// comparison shows whether that lock limits throughput. It reports tasks/s
// and order_share, the fraction of the clients' time spent in Order
// (waiting for the lock included):
//
//	scripts/with-postgres go test -run '^$' -bench OrderedDrain -benchtime 20000x ./store/pgstore/
func BenchmarkOrderedDrain(b *testing.B) {
	for _, clients := range []int{1, 4} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchOrderedDrain(b, clients) })
	}
}

func benchOrderedDrain(b *testing.B, clients int) {
	ctx := context.Background()
	url := testdb.Postgres(b)
	keys, batch := benchInt("BACKSTOP_BENCH_KEYS", 1000), benchInt("BACKSTOP_BENCH_BATCH", 100)
	cfg := &backstop.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues: map[string]backstop.QueueConfig{"oq": {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1}}}}
	stores := make([]*pgstore.Store, clients)
	cs := make([]*backstop.Client, clients)
	for i := range stores {
		s, err := pgstore.Open(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if i == 0 {
			if err := s.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if cs[i], err = backstop.NewClient(s, cfg); err != nil {
			b.Fatal(err)
		}
		stores[i] = s
	}
	var ps []backstop.EnqueueParams
	flush := func() {
		if _, err := cs[0].EnqueueMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
		ps = ps[:0]
	}
	for i := 0; i < b.N; i++ {
		ps = append(ps, backstop.EnqueueParams{Queue: "oq", Kind: "r", OrderingKey: fmt.Sprint("k", i%keys),
			Sequence: int64(i / keys)})
		if len(ps) == 1000 {
			flush()
		}
	}
	if len(ps) > 0 {
		flush()
	}
	var (
		done    atomic.Int64
		inOrder atomic.Int64 // ns spent in OrderQueue, all clients
		wg      sync.WaitGroup
		errs    = make(chan error, clients)
	)
	b.ResetTimer()
	start := time.Now()
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(b.N) {
				t0 := time.Now()
				if err := cs[i].OrderQueue(ctx, "oq"); err != nil {
					errs <- err
					return
				}
				inOrder.Add(int64(time.Since(t0)))
				ts, err := stores[i].Claim(ctx, store.ClaimParams{Queue: "oq", WorkerID: fmt.Sprint("w", i), Max: batch,
					Now: time.Now(), Lease: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				if len(ts) == 0 {
					continue
				}
				ss := make([]store.Settlement, len(ts))
				for j, t := range ts {
					ss[j] = store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, Outcome: backstop.OutcomeSucceeded,
						FinishedAt: time.Now(), State: backstop.StateSucceeded}
				}
				if _, err := stores[i].Settle(ctx, ss); err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(ts)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
	b.ReportMetric(float64(inOrder.Load())/float64(elapsed)/float64(clients), "order_share")
}
