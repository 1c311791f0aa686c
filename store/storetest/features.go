package storetest

import (
	"sync"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// testFeatures holds a driver to what it declares (store.Features): a
// settle parallelism of at least one, one for a single writer (and a claim
// parallelism of at most one, 0 counting as one), and, for a
// store with concurrent writers, a write that commits beside an open write
// transaction (the engine and these tests rely on it).
func (s *suite) testFeatures(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	f := b.store.Features()
	if f.SettleParallelism < 1 {
		t.Fatalf("SettleParallelism %d: at least 1", f.SettleParallelism)
	}
	if f.ClaimParallelism < 0 {
		t.Fatalf("ClaimParallelism %d: negative", f.ClaimParallelism)
	}
	if !f.ConcurrentWriters {
		if f.SettleParallelism != 1 || f.ClaimParallelism > 1 {
			t.Fatalf("one writer at a time, but SettleParallelism %d, ClaimParallelism %d", f.SettleParallelism, f.ClaimParallelism)
		}
		return
	}
	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(release) }) }
	defer end()
	txDone := make(chan error, 1)
	go func() {
		txDone <- b.store.InTx(b.ctx, func(tx store.Tx) error {
			if _, err := tx.Enqueue(b.ctx, []*bt.Task{newTask(b, "in-tx", "features")}, store.EnqueueOpts{}); err != nil {
				return err
			}
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	// The test hangs here (and the suite's timeout names it) if the store
	// makes the second writer wait.
	if _, err := b.store.Enqueue(b.ctx, []*bt.Task{newTask(b, "beside", "features")}, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	end()
	if err := <-txDone; err != nil {
		t.Fatal(err)
	}
}
