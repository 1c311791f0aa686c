package storetest

import (
	"testing"

	"github.com/backstophq/backstop"
)

// testOrderingReplayFirst: key k with 1 (dies), 2 and 3 waiting, and the
// operator replays 1 before any ordering pass saw its death (no worker
// ran between). The key is not left busy with the task it replays: the
// dead letter counts as handled, the replay is admitted first, then 2,
// then 3, one at a time.
func (s *suite) testOrderingReplayFirst(t *testing.T) {
	t.Parallel()
	b := s.ordBundle(t, backstop.OrderingConfig{Step: 1})
	b.ordEnqueue("k", 1)
	b.ordEnqueue("k", 2)
	b.ordEnqueue("k", 3)
	one, _ := b.claimOne()
	b.die(one)
	if r, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: one.ID, Actor: "op"}); err != nil || !r.Replayed {
		t.Fatalf("replay: %+v, %v", r, err)
	}
	again, seq := b.claimOne()
	eq(t, "the replay first", again.ID, one.ID)
	eq(t, "its sequence", seq, int64(1))
	b.noClaim() // 2 is held while the replay runs
	b.succeed(again)
	b.handleNext(2)
	b.handleNext(3)
	eq(t, "stale", b.c.OrderingStats().Stale.Load(), int64(0))
}
