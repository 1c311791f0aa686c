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
	var b settleBatcher
	for _, id := range []string{"a", "b", "a", "c", "a"} {
		b.pending = append(b.pending, &settleReq{s: store.Settlement{TaskID: id}})
	}
	var got [][]string
	for len(b.pending) > 0 {
		var ids []string
		for _, r := range b.take() {
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
		b.pending = append(b.pending, &settleReq{s: store.Settlement{TaskID: string(rune(len(b.pending)))}})
	}
	if n := len(b.take()); n != maxSettleBatch {
		t.Fatalf("first batch of %d, want %d", n, maxSettleBatch)
	}
}
