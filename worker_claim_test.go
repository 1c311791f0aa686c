package backstop

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"

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

// countingSQLite is a real SQLite store counting the worker's claims and
// settles by the path they take (its SettleClaim is the store's own,
// promoted from the embedded store).
type countingSQLite struct {
	*sqlitestore.Store
	claims, settles, settleClaims, claimedTogether atomic.Int64
}

func (c *countingSQLite) Claim(ctx context.Context, p store.ClaimParams) ([]*Task, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, p)
}

func (c *countingSQLite) Settle(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	c.settles.Add(1)
	return c.Store.Settle(ctx, ss)
}

func (c *countingSQLite) SettleClaim(ctx context.Context, ss []store.Settlement, p store.ClaimParams) ([]bool, []*Task, error) {
	c.settleClaims.Add(1)
	oks, ts, err := c.Store.SettleClaim(ctx, ss, p)
	c.claimedTogether.Add(int64(len(ts)))
	return oks, ts, err
}

// On SQLite a worker's finished batch settles and the next tasks of its
// queue are claimed in one transaction ("complete and fetch next"): after
// the first claim, the drain's claims ride on its settles. Every attempt is
// still settled once, and the kept counts agree with the rows.
func TestWorkerSettlesAndClaimsInOneTransaction(t *testing.T) {
	ctx := context.Background()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cs := &countingSQLite{Store: s}
	c, err := NewClient(cs, &Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	const n, slots = 600, 20
	ps := make([]EnqueueParams, n)
	for i := range ps {
		ps[i] = EnqueueParams{Queue: "cf", Kind: "k"}
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"cf": slots}, MaintenanceInterval: -1,
		PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		seen  = map[string]int{}
		peak  int
		inRun int
	)
	w.Handle("k", HandlerFunc(func(ctx context.Context, tk *Task) error {
		mu.Lock()
		seen[tk.ID]++
		inRun++
		peak = max(peak, inRun)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		inRun--
		mu.Unlock()
		return nil
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "every task succeeded", func() bool {
		qs, err := c.Queues(ctx)
		for _, q := range qs {
			if q.Name == "cf" {
				return err == nil && q.Counts[StateSucceeded] == n
			}
		}
		return false
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("%d distinct tasks ran, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("task %s ran %d times", id, k)
		}
	}
	if peak > slots {
		t.Fatalf("%d attempts ran at once in %d slots", peak, slots)
	}
	if cs.settleClaims.Load() == 0 || cs.claimedTogether.Load() == 0 {
		t.Fatalf("no settle claimed the next tasks (claims %d, settles %d, settle+claims %d)",
			cs.claims.Load(), cs.settles.Load(), cs.settleClaims.Load())
	}
	if together := cs.claimedTogether.Load(); together < n/2 {
		t.Errorf("only %d of %d tasks claimed with a settle (claims %d, settles %d, settle+claims %d)",
			together, n, cs.claims.Load(), cs.settles.Load(), cs.settleClaims.Load())
	}
	t.Logf("claims %d, settles %d, settle+claims %d claiming %d tasks", cs.claims.Load(), cs.settles.Load(),
		cs.settleClaims.Load(), cs.claimedTogether.Load())
}
