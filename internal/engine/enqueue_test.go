package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// gatedStore is a REAL store (SQLite or Postgres) that records each
// Enqueue it receives (each one transaction) and holds the first back
// until open is closed, so that the callers behind it queue.
type gatedStore struct {
	store.Store
	mu      sync.Mutex
	calls   []int // tasks per Enqueue, in order
	entered chan struct{}
	open    chan struct{}
}

func (g *gatedStore) Enqueue(ctx context.Context, tasks []*bt.Task, opts store.EnqueueOpts) ([]store.EnqueueResult, error) {
	g.mu.Lock()
	g.calls = append(g.calls, len(tasks))
	first := len(g.calls) == 1
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.open
	}
	return g.Store.Enqueue(ctx, tasks, opts)
}

func (g *gatedStore) callsSince(n int) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.calls[n:]...)
}

// Concurrent single enqueues are written together: one store.Enqueue (one
// transaction) for all that queued behind a write in progress, each caller
// with its own result (two callers with one idempotency key: the first
// inserts, the second is its duplicate, as one after the other). A task
// that cannot be written (a taken id) fails its caller alone: the others
// are written, each on its own.
func TestEnqueueOneCoalesces(t *testing.T) {
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
		g := &gatedStore{Store: s, entered: make(chan struct{}), open: make(chan struct{})}
		e, err := New(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		enqueue := func(p EnqueueParams) (store.EnqueueResult, error) {
			ps := []EnqueueParams{p}
			ts, err := e.PrepareAll(ps)
			if err != nil {
				return store.EnqueueResult{}, err
			}
			return e.EnqueueOne(ctx, ts[0], e.EnqueueOpts(ctx, ps, ts))
		}

		// round runs first alone (held in the store), then params
		// concurrently behind it, and returns their results.
		round := func(first EnqueueParams, params []EnqueueParams) ([]store.EnqueueResult, []error) {
			firstDone := make(chan error, 1)
			go func() { _, err := enqueue(first); firstDone <- err }()
			<-g.entered
			rs, errs := make([]store.EnqueueResult, len(params)), make([]error, len(params))
			var wg sync.WaitGroup
			for i, p := range params {
				wg.Go(func() { rs[i], errs[i] = enqueue(p) })
			}
			testwait.For(t, "the callers to queue", func() bool {
				e.enqueues.mu.Lock()
				defer e.enqueues.mu.Unlock()
				return len(e.enqueues.pending) == len(params)
			})
			close(g.open)
			wg.Wait()
			if err := <-firstDone; err != nil {
				t.Fatal(err)
			}
			return rs, errs
		}

		const n = 20
		params := make([]EnqueueParams, n)
		for i := range params {
			params[i] = EnqueueParams{ID: fmt.Sprintf("one-%02d", i), Queue: "q", Kind: "k"}
		}
		params[3].IdempotencyKey, params[7].IdempotencyKey = "same", "same"
		rs, errs := round(EnqueueParams{ID: "first", Queue: "q", Kind: "k"}, params)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("caller %d: %v", i, err)
			}
		}
		if calls := g.callsSince(0); len(calls) != 2 || calls[1] != n {
			t.Fatalf("store.Enqueue calls of %v tasks, want [1 %d]: the callers queued behind the first one were not written together", calls, n)
		}
		for i, r := range rs {
			if i != 3 && i != 7 && (r.Duplicate || r.Merged || r.Task.ID != params[i].ID) {
				t.Fatalf("caller %d: %+v, want its own task %s inserted", i, r, params[i].ID)
			}
		}
		// The key's two tasks: whichever came first is inserted, the other
		// is its duplicate.
		a, b := rs[3], rs[7]
		if a.Duplicate {
			a, b = b, a
		}
		if a.Duplicate || !b.Duplicate || b.Task.ID != a.Task.ID {
			t.Fatalf("two callers with one idempotency key: %+v and %+v, want one inserted and the other its duplicate", a, b)
		}

		// Again, one of them naming a taken id.
		g.entered, g.open = make(chan struct{}), make(chan struct{})
		g.mu.Lock()
		g.calls = nil
		g.mu.Unlock()
		for i := range params {
			params[i] = EnqueueParams{ID: fmt.Sprintf("two-%02d", i), Queue: "q", Kind: "k"}
		}
		params[5].ID = "one-00"
		_, errs = round(EnqueueParams{ID: "first-2", Queue: "q", Kind: "k"}, params)
		for i, err := range errs {
			if i == 5 {
				if !errors.Is(err, store.ErrConflict) {
					t.Fatalf("the caller naming a taken id: %v, want ErrConflict", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("caller %d, in a batch with a taken id: %v, want its task written", i, err)
			}
			if _, err := s.Get(ctx, params[i].ID); err != nil {
				t.Fatalf("task %s: %v", params[i].ID, err)
			}
		}
		if got, err := s.Get(ctx, "one-00"); err != nil || got.CreatedAt.IsZero() {
			t.Fatalf("the taken id's task: %v, %v", got, err)
		}
	})
}

// A caller alone is written at once, in its own context: a canceled one
// writes nothing.
func TestEnqueueOneCanceled(t *testing.T) {
	t.Parallel()
	s, err := dburl.Open(t.Context(), testdb.SQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	e, err := New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := []EnqueueParams{{ID: "gone", Queue: "q", Kind: "k"}}
	ts, err := e.PrepareAll(ps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.EnqueueOne(ctx, ts[0], e.EnqueueOpts(ctx, ps, ts)); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled enqueue: %v, want context.Canceled", err)
	}
	if _, err := s.Get(t.Context(), "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("canceled enqueue wrote its task: %v", err)
	}
}
