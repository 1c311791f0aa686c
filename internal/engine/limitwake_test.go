package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// tokenReads counts the store's NextToken reads of a REAL SQLite store.
type tokenReads struct {
	store.Store
	n atomic.Int64
}

func (s *tokenReads) NextToken(ctx context.Context, queue string, now time.Time) (time.Time, error) {
	s.n.Add(1)
	return s.Store.NextToken(ctx, queue, now)
}

// TestNextTokenWaitReadsOnlyRateLimitedQueues: a short claim of a queue
// with only concurrency limits (or none) waits for no token and reads
// nothing from the store for it; one of a queue with a rate limit whose
// bucket is empty reads when the next token is due.
func TestNextTokenWaitReadsOnlyRateLimitedQueues(t *testing.T) {
	var reads *tokenReads
	h, _ := newSeamHarness(t, func(s store.Store) store.Store { reads = &tokenReads{Store: s}; return reads })
	ctx := context.Background()
	for _, l := range []backstop.Limit{{Name: "c5", Queue: "conc", Concurrency: 5}, {Name: "r1", Queue: "rate", Rate: 1, Burst: 1}} {
		if _, err := h.c.SetLimit(ctx, l, "test"); err != nil {
			t.Fatal(err)
		}
	}
	e := h.c.Engine()
	for _, q := range []string{"conc", "plain"} {
		if _, ok := e.NextTokenWait(ctx, q, time.Second); ok {
			t.Fatalf("queue %s waits for a token", q)
		}
	}
	if n := reads.n.Load(); n != 0 {
		t.Fatalf("%d NextToken reads for queues without rate limits, want 0", n)
	}
	// The rate limit's one token taken, the next is a second away.
	h.enqueue(backstop.EnqueueParams{Queue: "rate", Kind: "k"})
	h.enqueue(backstop.EnqueueParams{Queue: "rate", Kind: "k"})
	claimed, _, err := e.Claim(ctx, engine.ClaimParams{Queue: "rate", WorkerID: "w", Max: 2, Lease: time.Minute})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %d (%v), want 1 under a burst of 1", len(claimed), err)
	}
	if d, ok := e.NextTokenWait(ctx, "rate", 10*time.Second); !ok || d <= 0 || d > time.Second {
		t.Fatalf("rate-limited queue: wait %v, %v; want up to a second", d, ok)
	}
	if n := reads.n.Load(); n != 1 {
		t.Fatalf("%d NextToken reads, want 1 (the rate-limited queue's)", n)
	}
}
