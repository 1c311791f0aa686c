package backstop

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/probe"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
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

// probeMarks is a probe.Sink keeping the marks of a worker's claims and
// hand-offs.
type probeMarks struct {
	mu              sync.Mutex
	claims          []*probe.Claim
	handed, running map[string]time.Time
}

func (m *probeMarks) Claimed(c *probe.Claim) {
	m.mu.Lock()
	m.claims = append(m.claims, c)
	m.mu.Unlock()
}

func (m *probeMarks) Task(id string, stage probe.TaskStage, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if stage == probe.Handed {
		m.handed[id] = at
	} else {
		m.running[id] = at
	}
}

// After a claim that came back short (the queue caught up), a worker
// with many free slots claims whole, not split in parts side by side: at
// a low rate the parts find a task or two between them and the claim
// would hand its tasks over only once the slower part committed. Seen
// through the stage probe (internal/probe), which the worker takes from
// its start context: on Postgres the claim that took the second task ran
// one statement (split, it ran one in each part at least). On both stores
// the probe sees each task's claim, its hand-off and its goroutine, in
// that order.
func TestWorkerClaimsWholeAfterAShortClaim(t *testing.T) {
	forEachStoreClient(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"whole": 4 * minClaimPart}, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan string, 2)
		w.Handle("k", HandlerFunc(func(_ context.Context, tk *Task) error {
			started <- tk.ID
			return nil
		}))
		m := &probeMarks{handed: map[string]time.Time{}, running: map[string]time.Time{}}
		if err := w.Start(probe.WithSink(ctx, m)); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.Stop(ctx) }()
		var ids []string
		for range 2 {
			r, err := c.Enqueue(ctx, EnqueueParams{Queue: "whole", Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.Task.ID)
			select {
			case id := <-started:
				if id != r.Task.ID {
					t.Fatalf("started %s, want %s", id, r.Task.ID)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("task %s not started", r.Task.ID)
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		claimOf := map[string]*probe.Claim{}
		for _, cl := range m.claims {
			for _, id := range cl.IDs {
				claimOf[id] = cl
			}
		}
		for _, id := range ids {
			cl := claimOf[id]
			h, r := m.handed[id], m.running[id]
			if cl == nil || h.IsZero() || r.IsZero() || h.Before(cl.Returned) || r.Before(h) {
				t.Fatalf("task %s: claim %v, handed %v, running %v: want each marked, in that order", id, cl, h, r)
			}
		}
		if c.Store().Driver() != "postgres" {
			return
		}
		var kinds []string
		for _, p := range claimOf[ids[1]].Picks() {
			kinds = append(kinds, p.Kind)
		}
		if len(kinds) != 1 {
			t.Fatalf("the claim of the second task ran %d statements (%v), want one claim of one statement", len(kinds), kinds)
		}
	})
}

// gatedClaim is a REAL store whose first claim after arm waits at its
// start, before it reads the queue, until release.
type gatedClaim struct {
	store.Store
	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed once a claim waits
	release chan struct{}
}

func (g *gatedClaim) Claim(ctx context.Context, p store.ClaimParams) ([]*bt.Task, error) {
	g.mu.Lock()
	hold := g.armed
	g.armed = false
	g.mu.Unlock()
	if hold {
		close(g.held)
		<-g.release
	}
	return g.Store.Claim(ctx, p)
}

// TestWorkerClaimsBesideAClaimInFlight: once the queue has caught up (the
// last claim came back short), a wake-up that comes while a claim is in
// flight starts another claim beside it instead of waiting for it: the
// task it announces is handed over without waiting for the claim in
// flight to commit and then for a claim of its own. Here the claim in
// flight waits at its start until the test releases it; the task enqueued
// meanwhile starts before that (on main it started only after).
func TestWorkerClaimsBesideAClaimInFlight(t *testing.T) {
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := migratedStore(t, db.url(t))
			g := &gatedClaim{Store: s, held: make(chan struct{}), release: make(chan struct{})}
			c, err := NewClient(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"beside": 2 * minClaimPart}, PollInterval: time.Hour, MaintenanceInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan string, 4)
			w.Handle("k", HandlerFunc(func(_ context.Context, tk *Task) error {
				started <- tk.ID
				return nil
			}))
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.Stop(ctx) }()
			released := false
			defer func() { // before Stop, which waits for the claim in flight
				if !released {
					close(g.release)
				}
			}()
			enq := func() string {
				t.Helper()
				r, err := c.Enqueue(ctx, EnqueueParams{Queue: "beside", Kind: "k"})
				if err != nil {
					t.Fatal(err)
				}
				return r.Task.ID
			}
			wait := func(id string) { // other tasks may start before it
				t.Helper()
				limit := time.After(10 * time.Second)
				for {
					select {
					case got := <-started:
						if got == id {
							return
						}
					case <-limit:
						t.Fatalf("task %s not started while a claim was in flight", id)
					}
				}
			}
			// A claim that comes back short: the queue has caught up.
			wait(enq())
			// And for its task to end: while it is in flight (its settle
			// not yet written, slower on Postgres) fewer than 2 ×
			// minClaimPart slots are free and the next claim is not split.
			testwait.For(t, "the worker's claims and its task to end", func() bool {
				return w.claiming.Load() == 0 && w.queues[0].inflight.Load() == 0
			})
			g.mu.Lock()
			g.armed = true
			g.mu.Unlock()
			b := enq() // its wake-up starts the claim that waits
			<-g.held
			enq() // a wake-up while that claim is in flight
			wait(b)
			close(g.release)
			released = true
		})
	}
}

// A worker on Postgres warms its store's connections at Start
// (store.Warmer): by the time Start returns the pool holds as many
// connections as the worker's claims and settles use at once, before any
// task asked for one. On SQLite there is nothing to warm: Start works as
// before.
func TestWorkerWarmsItsConnectionsAtStart(t *testing.T) {
	forEachStoreClient(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"warm": 8}, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan string, 1)
		w.Handle("k", HandlerFunc(func(_ context.Context, tk *Task) error {
			started <- tk.ID
			return nil
		}))
		pooled, onPG := c.store.(interface{ Pool() *pgxpool.Pool })
		if onPG && pooled.Pool().Stat().TotalConns() > 2 {
			t.Fatalf("%d connections before Start", pooled.Pool().Stat().TotalConns())
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.Stop(ctx) }()
		if onPG {
			f := c.store.Features()
			if got, want := pooled.Pool().Stat().TotalConns(), int32(2*f.ClaimParallelism+f.SettleParallelism); got < want {
				t.Errorf("%d connections when Start returned, want at least %d", got, want)
			}
		}
		r, err := c.Enqueue(ctx, EnqueueParams{Queue: "warm", Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-started:
			if id != r.Task.ID {
				t.Fatalf("started %s, want %s", id, r.Task.ID)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("task not started")
		}
	})
}
