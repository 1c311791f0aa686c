package engine

import (
	"testing"

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
