package storetest

import (
	"cmp"
	"errors"
	"slices"
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
	t.Run("OneValueIsPlainOrder", func(t *testing.T) {
		t.Parallel()
		b := s.fairBundle(t, nil)
		// One tenant, mixed priorities and run_at: the claims follow the
		// plain order (priority, then run_at, then id), batch after batch.
		now := b.clock.Now()
		var want []string
		for i, tk := range []struct {
			priority int
			runAt    time.Duration
		}{{0, 0}, {5, 0}, {0, -time.Hour}, {2, -time.Minute}, {5, -time.Second}, {0, -59 * time.Minute}, {2, 0}} {
			b.clock.Advance(time.Microsecond)
			id := b.enqueue(backstop.EnqueueParams{Queue: "fq", Kind: "k", Priority: tk.priority, RunAt: now.Add(tk.runAt),
				Attributes: map[string]string{"tenant": "a"}}).ID
			want = append(want, []string{"7", "2", "5", "3", "1", "6", "4"}[i]+":"+id)
		}
		slices.Sort(want) // the claim order, by the rank prefix
		for i := range want {
			want[i] = want[i][strings.Index(want[i], ":")+1:]
		}
		var got []string
		for _, n := range []int{1, 2, 3, 1} {
			ts, _, err := b.c.Engine().Claim(b.ctx, engine.ClaimParams{Queue: "fq", WorkerID: "w", Max: n, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range ts {
				got = append(got, tk.ID)
			}
		}
		eq(t, "claim order", got, want)
		// A value that starts waiting meanwhile joins the rotation within
		// store.FairOneValueFor of the claims' clock.
		b.fairEnqueue("a", 3, 0)
		b.fairEnqueue("b", 2, 0)
		b.clock.Advance(store.FairOneValueFor)
		eq(t, "claim order with b", strings.Join(b.fairClaim(1), "")+strings.Join(b.fairClaim(1), "")+strings.Join(b.fairClaim(1), ""), "aba")
	})
	t.Run("WithLimits", func(t *testing.T) {
		t.Parallel()
		b := s.fairBundle(t, nil)
		// Tenant a's tasks are of a kind limited to one running at once.
		if _, err := b.c.SetLimit(b.ctx, backstop.Limit{Name: "heavy1", Queue: "fq", Kind: "heavy", Concurrency: 1}, "ops"); err != nil {
			t.Fatal(err)
		}
		for _, tenant := range []string{"a", "b", "c"} {
			kind := map[string]string{"a": "heavy"}[tenant]
			for range 4 {
				b.clock.Advance(time.Microsecond)
				b.enqueue(backstop.EnqueueParams{Queue: "fq", Kind: cmp.Or(kind, "k"), Attributes: map[string]string{"tenant": tenant}})
			}
		}
		var got []string
		var running []*backstop.Task
		for range 7 {
			ts, _, err := b.c.Engine().Claim(b.ctx, engine.ClaimParams{Queue: "fq", WorkerID: "w", Max: 1, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range ts {
				got = append(got, tk.Attributes["tenant"])
				running = append(running, tk)
			}
		}
		// a is held at one running task; the rotation goes on over b and c.
		eq(t, "claim order", strings.Join(got, ""), "abc"+"bcbc")
		settle(t, b, store.Settlement{TaskID: running[0].ID, ExecutionID: running[0].ExecutionID, Outcome: backstop.OutcomeSucceeded,
			FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
		// a's slot back, it rejoins level with the others (held back, it
		// earned no credit); a batch takes one of a, within its limit.
		eq(t, "batch after a's slot came back", strings.Join(b.fairClaim(4), ""), "abc")
	})
	t.Run("WithRateLimit", func(t *testing.T) {
		t.Parallel()
		b := s.fairBundle(t, nil)
		// Tenant a's tasks are of a kind limited to one start a second.
		if _, err := b.c.SetLimit(b.ctx, backstop.Limit{Name: "slow", Queue: "fq", Kind: "heavy", Rate: 1, Burst: 1}, "ops"); err != nil {
			t.Fatal(err)
		}
		for _, tenant := range []string{"a", "b", "c"} {
			for range 4 {
				b.clock.Advance(time.Microsecond)
				b.enqueue(backstop.EnqueueParams{Queue: "fq", Kind: map[string]string{"a": "heavy", "b": "k", "c": "k"}[tenant],
					Attributes: map[string]string{"tenant": tenant}})
			}
		}
		var got string
		for range 5 {
			got += strings.Join(b.fairClaim(1), "")
		}
		// a spent its token; the rotation goes on over b and c.
		eq(t, "claim order", got, "abc"+"bc")
		b.clock.Advance(time.Second)
		got = ""
		for range 3 {
			got += strings.Join(b.fairClaim(1), "")
		}
		eq(t, "claim order a second later", got, "abc")
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
