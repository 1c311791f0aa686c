package engine

import (
	"testing"

	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// TestSettleBatcherTake: a batch never names one task twice (the second
// settlement waits for the next batch, where its lease is already settled)
// and never exceeds maxSettleBatch.
func TestSettleBatcherTake(t *testing.T) {
	t.Parallel()
	var pending []*settleReq
	for _, id := range []string{"a", "b", "a", "c", "a"} {
		pending = append(pending, &settleReq{s: store.Settlement{TaskID: id}})
	}
	var got [][]string
	for len(pending) > 0 {
		var ids []string
		var batch []*settleReq
		batch, pending = takeSettles(pending)
		for _, r := range batch {
			ids = append(ids, r.s.TaskID)
		}
		got = append(got, ids)
	}
	want := [][]string{{"a", "b", "c"}, {"a"}, {"a"}}
	if len(got) != len(want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("batches %v, want %v", got, want)
			}
		}
	}
	for range maxSettleBatch + 3 {
		pending = append(pending, &settleReq{s: store.Settlement{TaskID: string(rune(len(pending)))}})
	}
	if batch, _ := takeSettles(pending); len(batch) != maxSettleBatch {
		t.Fatalf("first batch of %d, want %d", len(batch), maxSettleBatch)
	}
}

// TestCoalescerHandsOver: requests that queue behind a flush are written
// together in the next batch, and the caller that flushed first returns
// once its own request is written, not after the others' batch.
func TestCoalescerHandsOver(t *testing.T) {
	t.Parallel()
	var c coalescer[*int]
	take := func(p []*int) ([]*int, []*int) { return p, nil }
	started := make(chan []*int)
	release := make(chan struct{})
	flush := func(b []*int) {
		started <- b
		<-release
	}
	a, b, d := new(int), new(int), new(int)
	aDone := make(chan struct{})
	go func() { c.submit([]*int{a}, take, flush); close(aDone) }()
	if got := <-started; len(got) != 1 || got[0] != a {
		t.Fatalf("first batch %v, want a alone", got)
	}
	c.submit([]*int{b}, take, flush) // a flush is under way: queued, returns at once
	c.submit([]*int{d}, take, flush)
	release <- struct{}{}
	got := <-started // the others' batch, flushed while a has returned
	<-aDone
	if len(got) != 2 || got[0] != b || got[1] != d {
		t.Fatalf("second batch %v, want b and d together", got)
	}
	release <- struct{}{}
	testwait.For(t, "the coalescer to be idle", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.flushing && len(c.pending) == 0
	})
}
