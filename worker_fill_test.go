package backstop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// A completer that takes settlements while another completer's batch is
// being written lets its batch fill until that write ends: what arrives
// meanwhile is written in one statement after it (one commit), not in
// batches beside it. The first batch, one settlement with nothing being
// written, is written at once.
func TestCompleterFillsWhileABatchIsWritten(t *testing.T) {
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := migratedStore(t, db.url(t))
			c, err := NewClient(s, nil)
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
					<-holdFirst // the first batch is being written until the test says
				}
			}
			w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"fill": k}, SettleParallelism: 2, MaintenanceInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			w.fillWait = time.Minute // the batch ends when the first is written
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
				for _, ch := range []chan struct{}{proceed, holdFirst} {
					select {
					case <-ch:
					default:
						close(ch)
					}
				}
				_ = w.Stop(ctx)
			}()
			var sizes []int
			sizes = append(sizes, <-batches) // the first task's settlement, alone, held being written
			close(proceed)                   // the rest finish (this claim's and the next's) and hand theirs over
			for end := time.Now().Add(30 * time.Second); handled.Load() < 2*k || w.Running() > 0 || len(w.settleCh) > 0; time.Sleep(time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("%d of %d handled, %d settlements waiting; batches so far: %d", handled.Load(), 2*k, len(w.settleCh), len(batches))
				}
			}
			close(holdFirst)
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
				t.Errorf("settle batches %v, want [1 %d]: what arrived while the first was written in one batch after it", sizes, 2*k-1)
			}
		})
	}
}
