package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// readGate holds the claim path's periodic reads (the claim settings and
// the look for ordered tasks on an undeclared queue) while it is shut.
type readGate struct {
	store.Store
	shut    atomic.Bool
	open    chan struct{}
	entered atomic.Int32 // reads that met the gate shut
}

func (g *readGate) wait() {
	if g.shut.Load() {
		g.entered.Add(1)
		<-g.open
	}
}

func (g *readGate) ListLimits(ctx context.Context) ([]store.Limit, error) {
	g.wait()
	return g.Store.ListLimits(ctx)
}

func (g *readGate) ListFair(ctx context.Context) ([]store.FairQueue, error) {
	g.wait()
	return g.Store.ListFair(ctx)
}

func (g *readGate) OrderingKeys(ctx context.Context, queue, after string, limit int) ([]store.OrderingKeyInfo, error) {
	g.wait()
	return g.Store.OrderingKeys(ctx, queue, after, limit)
}

// TestClaimDoesNotWaitForPeriodicReads: once the claim settings and the
// look for ordered tasks are stale, a claim goes on with what it knows
// and the rereads run beside it (held here until the claim returned);
// they are then kept. The first read is waited for.
func TestClaimDoesNotWaitForPeriodicReads(t *testing.T) {
	t.Parallel()
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := t.Context()
		s, err := dburl.Open(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		g := &readGate{Store: s, open: make(chan struct{})}
		e, err := New(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		claim := func() int {
			t.Helper()
			ps := []EnqueueParams{{Queue: "q", Kind: "k"}}
			ts, err := e.PrepareAll(ps)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.EnqueueOne(ctx, ts[0], e.EnqueueOpts(ctx, ps, ts)); err != nil {
				t.Fatal(err)
			}
			got, _, err := e.Claim(ctx, ClaimParams{Queue: "q", WorkerID: "w", Max: 10, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			return len(got)
		}
		if n := claim(); n != 1 { // the first reads, waited for
			t.Fatalf("first claim got %d tasks, want 1", n)
		}
		// Both stale, and their reads held.
		stale := *e.claimSettings.cur.Load()
		stale.read = time.Now().Add(-2 * LimitsRefresh)
		e.claimSettings.cur.Store(&stale)
		e.implicit.mu.Lock()
		q := e.implicit.queues["q"]
		q.next = time.Now().Add(-time.Second)
		e.implicit.queues["q"] = q
		e.implicit.mu.Unlock()
		g.shut.Store(true)

		done := make(chan int, 1)
		go func() { done <- claim() }()
		select {
		case n := <-done:
			if n != 1 {
				t.Fatalf("claim with stale reads got %d tasks, want 1", n)
			}
		case <-time.After(30 * time.Second):
			close(g.open)
			t.Fatal("the claim waited for the periodic reads")
		}
		testwait.For(t, "the rereads to start", func() bool { return g.entered.Load() == 2 }) // ListLimits, OrderingKeys
		g.shut.Store(false)
		close(g.open)
		testwait.For(t, "the rereads to be kept", func() bool {
			e.implicit.mu.Lock()
			q := e.implicit.queues["q"]
			e.implicit.mu.Unlock()
			return e.claimSettings.cur.Load().read.After(stale.read.Add(LimitsRefresh)) && time.Now().Before(q.next) && !q.looking
		})
	})
}
