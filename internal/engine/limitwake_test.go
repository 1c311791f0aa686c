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
		if _, ok := e.NextTokenWait(ctx, q, e.Now(), time.Second); ok {
			t.Fatalf("queue %s waits for a token", q)
		}
	}
	if n := reads.n.Load(); n != 0 {
		t.Fatalf("%d NextToken reads for queues without rate limits, want 0", n)
	}
	// The rate limit's one token taken, the next is a second away.
	h.enqueue(backstop.EnqueueParams{Queue: "rate", Kind: "k"})
	h.enqueue(backstop.EnqueueParams{Queue: "rate", Kind: "k"})
	at := e.Now()
	claimed, _, err := e.Claim(ctx, engine.ClaimParams{Queue: "rate", WorkerID: "w", Max: 2, Lease: time.Minute})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %d (%v), want 1 under a burst of 1", len(claimed), err)
	}
	if d, ok := e.NextTokenWait(ctx, "rate", at, 10*time.Second); !ok || d <= 0 || d > time.Second {
		t.Fatalf("rate-limited queue: wait %v, %v; want up to a second", d, ok)
	}
	if n := reads.n.Load(); n != 1 {
		t.Fatalf("%d NextToken reads, want 1 (the rate-limited queue's)", n)
	}
}

// TestNextTokenWaitAfterTheTokenCame: a worker that asks about its short
// claim only after the rate limit's next token came (a busy machine: the
// claim's commit, the read and the worker's turn on the CPU took longer
// than 1/rate) claims again at once. Asked about now instead of the
// claim's time, every budget holds a whole token again, and the worker
// waited for its poll (an hour in TestRateLimitedWorkerWakesForTheNextToken,
// which timed out on loaded machines).
func TestNextTokenWaitAfterTheTokenCame(t *testing.T) {
	h, clk := newSeamHarness(t, func(s store.Store) store.Store { return s })
	ctx := context.Background()
	if _, err := h.c.SetLimit(ctx, backstop.Limit{Name: "r20", Queue: "rate", Rate: 20, Burst: 1}, "test"); err != nil {
		t.Fatal(err)
	}
	h.enqueue(backstop.EnqueueParams{Queue: "rate", Kind: "k"})
	h.enqueue(backstop.EnqueueParams{Queue: "rate", Kind: "k"})
	e := h.c.Engine()
	at := e.Now()
	claimed, _, err := e.Claim(ctx, engine.ClaimParams{Queue: "rate", WorkerID: "w", Max: 2, Lease: time.Minute})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %d (%v), want 1 under a burst of 1", len(claimed), err)
	}
	clk.Advance(200 * time.Millisecond) // four tokens' time at 20/s; the bucket holds one
	if d, ok := e.NextTokenWait(ctx, "rate", at, time.Hour); !ok || d != time.Millisecond {
		t.Fatalf("asked after the token came: wait %v, %v; want a millisecond (claim again now)", d, ok)
	}
	claimed, _, err = e.Claim(ctx, engine.ClaimParams{Queue: "rate", WorkerID: "w", Max: 2, Lease: time.Minute})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %d (%v) with the token, want 1", len(claimed), err)
	}
	// A queue whose budget was not short at the claim waits for no token
	// (no claim every millisecond of an idle rate-limited queue).
	clk.Advance(time.Second)
	at = e.Now()
	if claimed, _, err = e.Claim(ctx, engine.ClaimParams{Queue: "rate", WorkerID: "w", Max: 2, Lease: time.Minute}); err != nil || len(claimed) != 0 {
		t.Fatalf("claimed %d (%v) of an empty queue", len(claimed), err)
	}
	clk.Advance(time.Second)
	if d, ok := e.NextTokenWait(ctx, "rate", at, time.Hour); ok {
		t.Fatalf("empty queue with a full bucket waits %v for a token", d)
	}
}
