package backstop

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A worker with many free slots claims them as the store's claim
// parallelism says (store.Features.ClaimParallelism): on Postgres two
// claims of half each at once, on SQLite one. A claim's execution ids
// share its prefix on both stores, so the prefixes of the tasks the first
// claims started count the claims.
func TestWorkerSplitsLargeClaims(t *testing.T) {
	forEachStoreClient(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		const n = 4 * minClaimPart
		ps := make([]EnqueueParams, n)
		for i := range ps {
			ps[i] = EnqueueParams{Queue: "split", Kind: "k"}
		}
		if _, err := c.EnqueueMany(ctx, ps); err != nil {
			t.Fatal(err)
		}
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"split": n}, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu       sync.Mutex
			prefixes = map[string]int{}
			started  int
			all      = make(chan struct{})
		)
		w.Handle("k", HandlerFunc(func(ctx context.Context, tk *Task) error {
			mu.Lock()
			prefixes[tk.ExecutionID[:24]]++
			started++
			if started == n {
				close(all)
			}
			mu.Unlock()
			<-all // every task is claimed before any finishes: the first claims took them all
			return nil
		}))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.Stop(ctx) }()
		select {
		case <-all:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d tasks started", started, n)
		}
		want := 1
		if c.Store().Driver() == "postgres" {
			want = 2
		}
		mu.Lock()
		defer mu.Unlock()
		if len(prefixes) != want {
			t.Fatalf("%d tasks started by %d claims (%v), want %d", n, len(prefixes), prefixes, want)
		}
		for p, k := range prefixes {
			if k != n/want {
				t.Fatalf("claim %s took %d tasks, want %d", p, k, n/want)
			}
		}
	})
}
