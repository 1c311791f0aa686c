package backstop

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A worker with many free slots claims them as the store's claim
// parallelism says (store.Features.ClaimParallelism): on Postgres two
// claims of half each at once (each claim writes one task.claimed row
// of the log, listing its tasks), on SQLite one (a claim's execution ids
// share its prefix there).
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
		mu.Lock()
		defer mu.Unlock()
		claims := map[string]int{} // tasks per claim
		if p, ok := c.Store().(interface{ Pool() *pgxpool.Pool }); ok {
			rows, err := p.Pool().Query(ctx, `SELECT seq::text, cardinality(subjects) FROM backstop_events WHERE type = 'task.claimed'`)
			if err != nil {
				t.Fatal(err)
			}
			var (
				seq string
				k   int
			)
			if _, err := pgx.ForEachRow(rows, []any{&seq, &k}, func() error { claims[seq] = k; return nil }); err != nil {
				t.Fatal(err)
			}
		} else {
			claims = prefixes
		}
		want := 1
		if c.Store().Driver() == "postgres" {
			want = 2
		}
		if len(claims) != want {
			t.Fatalf("%d tasks started by %d claims (%v), want %d", n, len(claims), claims, want)
		}
		for p, k := range claims {
			if k != n/want {
				t.Fatalf("claim %s took %d tasks, want %d", p, k, n/want)
			}
		}
	})
}
