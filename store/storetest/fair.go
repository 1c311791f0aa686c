package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// testFairness: a fair queue's claims rotate across the values of its
// attribute (weighted round robin), priority first; with one value the
// claim order is the plain one; turned off, claims are plain again.
func (s *suite) testFairness(t *testing.T) {
	t.Run("Rotation", func(t *testing.T) {
		t.Parallel()
		b := s.fairBundle(t, nil)
		b.fairEnqueue("a", 6, 0)
		b.fairEnqueue("b", 3, 0)
		var got []string
		for range 9 {
			got = append(got, b.fairClaim(1)...)
		}
		eq(t, "claim order", strings.Join(got, ""), "ababab"+"aaa")
	})
	t.Run("Weights", func(t *testing.T) {
		t.Parallel()
		b := s.fairBundle(t, map[string]int{"a": 2})
		b.fairEnqueue("a", 10, 0)
		b.fairEnqueue("b", 10, 0)
		var got []string
		for range 9 {
			got = append(got, b.fairClaim(1)...)
		}
		eq(t, "claim order", strings.Join(got, ""), "aab"+"aab"+"aab")
		// A batch takes the same shares.
		eq(t, "next batch", strings.Join(b.fairClaim(6), ""), "aaaabb")
	})
	t.Run("PriorityFirst", func(t *testing.T) {
		t.Parallel()
		b := s.fairBundle(t, nil)
		b.fairEnqueue("a", 4, 0)
		b.fairEnqueue("a", 2, 5)
		b.fairEnqueue("b", 2, 0)
		var got []string
		for range 6 {
			got = append(got, b.fairClaim(1)...)
		}
		// a's priority tasks count against its share: b catches up.
		eq(t, "claim order", strings.Join(got, ""), "aa"+"bb"+"aa")
	})
	t.Run("OneValueAndOff", func(t *testing.T) {
		t.Parallel()
		b := s.fairBundle(t, nil)
		ids := b.fairEnqueue("a", 3, 0)
		ts, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "fq", WorkerID: "w", Max: 2, Now: b.clock.Now(), Lease: time.Minute, Fair: true})
		if err != nil || len(ts) != 2 || ts[0].ID != ids[0] || ts[1].ID != ids[1] {
			t.Fatalf("one value: %v %v, want the two oldest", ts, err)
		}
		removed, err := b.c.RemoveFair(b.ctx, "fq", "")
		if err != nil || !removed {
			t.Fatalf("remove fair: %v %v", removed, err)
		}
		fs, err := b.c.FairQueues(b.ctx)
		if err != nil || len(fs) != 0 {
			t.Fatalf("fair queues after off: %v %v", fs, err)
		}
		b.fairEnqueue("b", 1, 0)
		// Not fair any more: the flag alone claims the plain order.
		ts, err = b.store.Claim(b.ctx, store.ClaimParams{Queue: "fq", WorkerID: "w", Max: 1, Now: b.clock.Now(), Lease: time.Minute, Fair: true})
		if err != nil || len(ts) != 1 || ts[0].ID != ids[2] {
			t.Fatalf("after off: %v %v, want the oldest", ts, err)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for _, f := range []backstop.FairQueue{
			{Queue: "fq"}, {Queue: "fq", By: "bad key"}, {By: "tenant"},
			{Queue: "fq", By: "tenant", Weights: map[string]int{"a": 0}},
		} {
			if _, err := b.c.SetFair(b.ctx, f, ""); !errors.Is(err, backstop.ErrInvalid) {
				t.Errorf("%+v: %v, want a validation error", f, err)
			}
		}
		fs, err := b.c.FairQueues(b.ctx)
		if err != nil || len(fs) != 0 {
			t.Fatalf("bad input wrote %v (%v)", fs, err)
		}
	})
}

// fairBundle is a bundle on a frozen clock with queue fq fair by tenant.
func (s *suite) fairBundle(t *testing.T, weights map[string]int) *bundle {
	b := s.setup(t, nil)
	b.clock.freeze()
	f, err := b.c.SetFair(b.ctx, backstop.FairQueue{Queue: "fq", By: "tenant", Weights: weights}, "")
	if err != nil {
		t.Fatal(err)
	}
	fs, err := b.c.FairQueues(b.ctx)
	if err != nil || len(fs) != 1 || fs[0].By != "tenant" || fs[0].Queue != "fq" || len(fs[0].Weights) != len(weights) {
		t.Fatalf("fair queues: %+v %v, want %+v", fs, err, f)
	}
	return b
}

// fairEnqueue enqueues n tasks of tenant on fq at priority, each a
// microsecond after the last, and returns their ids.
func (b *bundle) fairEnqueue(tenant string, n, priority int) []string {
	b.t.Helper()
	ids := make([]string, n)
	for i := range n {
		b.clock.Advance(time.Microsecond)
		ids[i] = b.enqueue(backstop.EnqueueParams{Queue: "fq", Kind: "k", Priority: priority,
			Attributes: map[string]string{"tenant": tenant}}).ID
	}
	return ids
}

// fairClaim claims up to n tasks of fq through the engine and returns
// their tenants (a batch comes in priority and run_at order).
func (b *bundle) fairClaim(n int) []string {
	b.t.Helper()
	ts, _, err := b.c.Engine().Claim(b.ctx, engine.ClaimParams{Queue: "fq", WorkerID: "w", Max: n, Lease: time.Minute})
	if err != nil {
		b.t.Fatal(err)
	}
	out := make([]string, len(ts))
	for i, tk := range ts {
		out[i] = tk.Attributes["tenant"]
	}
	return out
}
