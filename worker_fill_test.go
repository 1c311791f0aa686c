package backstop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// claimGateStore holds the second claim until release is closed (entered
// is closed once it waits).
type claimGateStore struct {
	store.Store
	claims           atomic.Int32
	entered, release chan struct{}
}

func (s *claimGateStore) Claim(ctx context.Context, p store.ClaimParams) ([]*Task, error) {
	if s.claims.Add(1) == 2 {
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Claim(ctx, p)
}

// A completer that finds a backlog of settlements waiting while a claim is
// in flight lets its batch fill: the settlements of the tasks that claim
// starts are written in the same statement (one commit) instead of the
// next. The first batch, one settlement, is an idle settle: written at
// once although a claim is in flight.
func TestCompleterFillsWhileAClaimIsInFlight(t *testing.T) {
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := dburl.Open(ctx, db.url(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			gs := &claimGateStore{Store: s, entered: make(chan struct{}), release: make(chan struct{})}
			c, err := NewClient(gs, nil)
			if err != nil {
				t.Fatal(err)
			}
			const k = 200 // slots; one claim part (below 2*minClaimPart)
			ps := make([]EnqueueParams, 2*k)
			for i := range ps {
				ps[i] = EnqueueParams{Queue: "fill", Kind: "k"}
			}
			if _, err := c.EnqueueMany(ctx, ps); err != nil {
				t.Fatal(err)
			}
			batches := make(chan int, 2*k)
			holdFirst := make(chan struct{})
			var settles atomic.Int32
			c.e.SettleSeen = func(ss []store.Settlement) {
				batches <- len(ss)
				if settles.Add(1) == 1 {
					<-holdFirst // the rest of the first claim's settlements queue up meanwhile
				}
			}
			w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"fill": k}, SettleParallelism: 1, MaintenanceInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			w.fillWait = 3 * time.Second // long enough for any box; the batch ends at it
			proceed := make(chan struct{})
			var handled atomic.Int32
			w.Handle("k", HandlerFunc(func(ctx context.Context, _ *Task) error {
				if handled.Add(1) > 1 {
					<-proceed
				}
				return nil
			}))
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, ch := range []chan struct{}{proceed, holdFirst, gs.release} {
					select {
					case <-ch:
					default:
						close(ch)
					}
				}
				_ = w.Stop(ctx)
			}()
			wait := func(what string, cond func() bool) {
				t.Helper()
				for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
					if time.Now().After(end) {
						t.Fatalf("timed out waiting for %s", what)
					}
				}
			}
			var sizes []int
			sizes = append(sizes, <-batches) // the first task's settlement, alone
			close(proceed)                   // the other k-1 finish and queue
			<-gs.entered                     // the next claim is in flight, held
			wait("the first claim's settlements to queue", func() bool { return len(w.settleCh) == k-1 })
			close(holdFirst)
			wait("the completer to take them", func() bool { return len(w.settleCh) == 0 })
			close(gs.release)
			for total := sizes[0]; total < 2*k; {
				select {
				case n := <-batches:
					sizes = append(sizes, n)
					total += n
				case <-time.After(30 * time.Second):
					t.Fatalf("settle batches %v: not all %d tasks settled", sizes, 2*k)
				}
			}
			if sizes[0] != 1 || sizes[1] != 2*k-1 {
				t.Errorf("settle batches %v, want [1 %d]: the second claim's tasks in the batch that waited for it", sizes, 2*k-1)
			}
		})
	}
}
