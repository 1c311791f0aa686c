package backstop

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
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

// claimGate holds the first claim that meets it shut until it is opened;
// the claims after it pass.
type claimGate struct {
	store.Store
	shut   atomic.Bool
	open   chan struct{}
	claims atomic.Int32 // claims that reached the store
	held   atomic.Int32 // claims the gate held
}

func (g *claimGate) Claim(ctx context.Context, p store.ClaimParams) ([]*bt.Task, error) {
	if g.shut.Load() && g.held.Add(1) == 1 {
		<-g.open
	}
	g.claims.Add(1)
	return g.Store.Claim(ctx, p)
}

// A task enqueued while the worker's claim is stalled is claimed by a
// second claim beside it, on Postgres, without waiting for the stalled
// claim to end; each task still runs once.
func TestWorkerSecondClaimPassesAStalledClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := dburl.Open(ctx, testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	g := &claimGate{Store: s, open: make(chan struct{})}
	c, err := NewClient(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"stall": 10}, PollInterval: time.Hour, MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		runs = map[string]int{}
	)
	w.Handle("k", HandlerFunc(func(_ context.Context, tk *Task) error {
		mu.Lock()
		runs[tk.ID]++
		mu.Unlock()
		return nil
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(ctx) }()
	opened := false
	defer func() {
		if !opened {
			close(g.open)
		}
	}()
	// The first claim found the queue empty.
	testwait.For(t, "the first claim", func() bool { return g.claims.Load() >= 1 && w.claiming.Load() == 0 })
	g.shut.Store(true)
	a, err := c.Enqueue(ctx, EnqueueParams{Queue: "stall", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "a claim to stall", func() bool { return g.held.Load() == 1 })
	b, err := c.Enqueue(ctx, EnqueueParams{Queue: "stall", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	started := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(runs)
	}
	testwait.For(t, "both tasks to start while the first claim stalls", func() bool { return started() == 2 })
	if w.claiming.Load() != 1 {
		t.Fatalf("%d claims in flight, want the stalled one", w.claiming.Load())
	}
	close(g.open)
	opened = true
	testwait.For(t, "the stalled claim to return", func() bool { return w.claiming.Load() == 0 })
	for _, id := range []string{a.Task.ID, b.Task.ID} {
		testwait.For(t, "the task to succeed", func() bool {
			tk, err := c.Get(ctx, id)
			return err == nil && tk.State == StateSucceeded
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("task %s ran %d times", id, n)
		}
	}
}
