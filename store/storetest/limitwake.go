package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// testNextToken: NextToken says when the first rate budget of a queue
// that was short at the given time has a whole token again, at the store's
// clock: nothing before a budget is short, now + 1/rate once its one token
// is taken, the earliest of several budgets, the same answer (now past)
// when asked late about that time, a bucket stored after the time read at
// its own; a queue without rate limits has none.
func (s *suite) testNextToken(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.clock.freeze()
	for _, l := range []backstop.Limit{
		{Name: "per-tenant", Queue: "nt", Per: "tenant", Rate: 4, Burst: 1},
		{Name: "slots", Queue: "other", Concurrency: 1},
	} {
		if _, err := b.c.SetLimit(b.ctx, l, "test"); err != nil {
			t.Fatal(err)
		}
	}
	nextAt := func(queue string, at time.Time) time.Time {
		t.Helper()
		due, err := b.store.NextToken(b.ctx, queue, at)
		if err != nil {
			t.Fatal(err)
		}
		return due
	}
	next := func(queue string) time.Time { t.Helper(); return nextAt(queue, b.clock.Now()) }
	eq(t, "before any claim", next("nt"), time.Time{})
	for _, tenant := range []string{"a", "a", "b", "b"} {
		b.enqueue(backstop.EnqueueParams{Queue: "nt", Kind: "k", Attributes: map[string]string{"tenant": tenant}})
	}
	t0 := b.clock.Now()
	claimNT := func() int {
		t.Helper()
		ts, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "nt", WorkerID: "w", Max: 4, Now: b.clock.Now(), Lease: time.Minute, Limited: true})
		if err != nil {
			t.Fatal(err)
		}
		return len(ts)
	}
	eq(t, "first claim: one token per tenant", claimNT(), 2)
	eq(t, "both budgets short", next("nt"), t0.Add(250*time.Millisecond))
	b.clock.Advance(100 * time.Millisecond)
	eq(t, "still due then", next("nt"), t0.Add(250*time.Millisecond))
	b.clock.Advance(150 * time.Millisecond)
	eq(t, "second claim at the token", claimNT(), 2)
	t1 := b.clock.Now()
	eq(t, "the next one", next("nt"), t1.Add(250*time.Millisecond))
	eq(t, "asked at a time before the buckets were stored: read at theirs", nextAt("nt", t0), t1.Add(250*time.Millisecond))
	b.clock.Advance(time.Second)
	// A worker slow to ask about its short claim (a busy machine) is told
	// the token it missed, not "none short", which would leave it to its poll.
	eq(t, "asked late about the claim at t1: its token, now past", nextAt("nt", t1), t1.Add(250*time.Millisecond))
	eq(t, "refilled: none short", next("nt"), time.Time{})
	eq(t, "a concurrency limit has no tokens", next("other"), time.Time{})
}
