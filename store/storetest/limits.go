package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// testLimits: the store's limited claim (ClaimParams.Limited) never runs
// more of a limit's scope than its concurrency, however many claim at once;
// each value of a per attribute has its own budget; a kind's limit leaves
// other kinds alone; a task a limit holds back is not charged an attempt;
// an expired lease gives its slot back; uses are counted by value.
func (s *suite) testLimits(t *testing.T) {
	t.Run("ConcurrentClaimersNeverExceed", s.testLimitConcurrent)
	t.Run("PerAttributeBudgets", s.testLimitPerAttribute)
	t.Run("KindScope", s.testLimitKind)
	t.Run("ExpiredLeaseGivesSlotBack", s.testLimitExpiredLease)
	t.Run("Workers", s.testLimitWorkers)
	t.Run("RateBurstAndRefill", s.testRateBurstRefill)
	t.Run("RatePerAttribute", s.testRatePerAttribute)
	t.Run("RateAndConcurrency", s.testRateAndConcurrency)
	t.Run("RateConcurrentClaimers", s.testRateConcurrent)
}

func (b *bundle) setLimit(l store.Limit) {
	b.t.Helper()
	l.CreatedAt = b.clock.Now()
	if err := b.store.SetLimit(b.ctx, l, bt.Event{}); err != nil {
		b.t.Fatalf("set limit: %v", err)
	}
}

func (b *bundle) claimLimited(queue string, n int) []*backstop.Task {
	b.t.Helper()
	ts, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: queue, WorkerID: "w-test", Max: n, Now: b.clock.Now(),
		Lease: time.Minute, Limited: true})
	if err != nil {
		b.t.Fatalf("limited claim: %v", err)
	}
	return ts
}

func (s *suite) testLimitConcurrent(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	const limit, total, claimers = 3, 40, 8
	b.setLimit(store.Limit{Name: "three", Queue: "q", Concurrency: limit})
	for i := 0; i < total; i++ {
		b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k"})
	}
	var (
		inFlight, done, most atomic.Int64
		wg                   sync.WaitGroup
		errs                 = make(chan error, claimers)
	)
	for w := 0; w < claimers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < total {
				ts, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "q", WorkerID: fmt.Sprint("w", w), Max: 2,
					Now: b.clock.Now(), Lease: time.Minute, Limited: true})
				if err != nil {
					errs <- err
					return
				}
				// Counted up after the claim commits and down before the
				// settle does: never above the database's running rows.
				n := inFlight.Add(int64(len(ts)))
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if len(ts) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				time.Sleep(2 * time.Millisecond) // the work
				ss := make([]store.Settlement, len(ts))
				for i, task := range ts {
					ss[i] = store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeSucceeded,
						FinishedAt: b.clock.Now(), State: backstop.StateSucceeded}
				}
				inFlight.Add(-int64(len(ts)))
				if _, err := b.store.Settle(b.ctx, ss); err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(ts)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := most.Load(); m > limit || m == 0 {
		t.Fatalf("at most %d running at once, want 1..%d", m, limit)
	}
	eq(t, "succeeded", done.Load(), int64(total))
}

func (s *suite) testLimitPerAttribute(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.setLimit(store.Limit{Name: "one-per-tenant", Queue: "q", Per: "tenant", Concurrency: 1})
	for _, tenant := range []string{"a", "a", "b", "a", "b", ""} {
		attrs := map[string]string{}
		if tenant != "" {
			attrs["tenant"] = tenant
		}
		b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k", Attributes: attrs})
	}
	got := b.claimLimited("q", 10)
	tenants := map[string]int{}
	for _, task := range got {
		tenants[task.Attributes["tenant"]]++
	}
	eq(t, "one per tenant (and one without)", tenants, map[string]int{"a": 1, "b": 1, "": 1})
	if more := b.claimLimited("q", 10); len(more) != 0 {
		t.Fatalf("claimed %d more with every budget full", len(more))
	}
	// The plain claim does not read limits: the engine asks for the
	// limited one on queues that have them.
	pending, err := b.store.List(b.ctx, store.ListFilter{Queue: "q", States: []bt.State{backstop.StatePending}})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "held back", len(pending), 3)
	for _, task := range pending {
		eq(t, "attempts of a held-back task", task.Attempt, 0)
	}
	uses, err := b.store.LimitUses(b.ctx, b.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "uses", uses, []store.LimitUse{
		{Limit: "one-per-tenant", Value: "", Running: 1},
		{Limit: "one-per-tenant", Value: "a", Running: 1, Pending: 2, Waiting: 2},
		{Limit: "one-per-tenant", Value: "b", Running: 1, Pending: 1, Waiting: 1},
	})
	// One tenant's slot freed admits that tenant only.
	for _, task := range got {
		if task.Attributes["tenant"] == "a" {
			settle(t, b, store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeSucceeded,
				FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
		}
	}
	next := b.claimLimited("q", 10)
	if len(next) != 1 || next[0].Attributes["tenant"] != "a" {
		t.Fatalf("after a's slot came back: claimed %v, want one task of a", next)
	}
}

func (s *suite) testLimitKind(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.setLimit(store.Limit{Name: "heavy1", Queue: "q", Kind: "heavy", Concurrency: 1})
	for _, k := range []string{"heavy", "heavy", "light", "light"} {
		b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: k})
	}
	kinds := map[string]int{}
	for _, task := range b.claimLimited("q", 10) {
		kinds[task.Kind]++
	}
	eq(t, "claimed kinds", kinds, map[string]int{"heavy": 1, "light": 2})
	ls, err := b.store.ListLimits(b.ctx)
	if err != nil || len(ls) != 1 || ls[0].Kind != "heavy" || ls[0].Concurrency != 1 {
		t.Fatalf("limits: %+v %v", ls, err)
	}
	// Raising the limit admits the next one; removing it lifts it.
	b.setLimit(store.Limit{Name: "heavy1", Queue: "q", Kind: "heavy", Concurrency: 2})
	eq(t, "after raising", len(b.claimLimited("q", 10)), 1)
	removed, err := b.store.RemoveLimit(b.ctx, "heavy1", bt.Event{})
	if err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	if removed, err := b.store.RemoveLimit(b.ctx, "heavy1", bt.Event{}); err != nil || removed {
		t.Fatalf("remove twice: %v %v", removed, err)
	}
}

func (s *suite) testLimitExpiredLease(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.setLimit(store.Limit{Name: "solo", Queue: "q", Concurrency: 1})
	b.enqueue(backstop.EnqueueParams{ID: "first", Queue: "q", Kind: "k"})
	b.enqueue(backstop.EnqueueParams{ID: "second", Queue: "q", Kind: "k"})
	eq(t, "first claim", len(b.claimLimited("q", 10)), 1)
	eq(t, "while the lease holds", len(b.claimLimited("q", 10)), 0)
	// The worker died: its running row holds the slot until the lease
	// expiry sweep settles it.
	b.clock.Advance(2 * time.Minute)
	if err := backstop.Maintain(b.ctx, b.c); err != nil {
		t.Fatal(err)
	}
	eq(t, "after the lease expired", len(b.claimLimited("q", 10)), 1)
}

// testLimitWorkers: through the engine (Client.SetLimit, two workers of
// ten slots each), a tenant's limit of 2 holds however many slots are
// free, the other tenant runs beside it, and a held-back task says why.
func (s *suite) testLimitWorkers(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	if _, err := b.c.SetLimit(b.ctx, backstop.Limit{Name: "two-per-tenant", Queue: "lim", Kind: "job", Per: "tenant", Concurrency: 2}, "ops"); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		running = map[string]int{}
		most    = map[string]int{}
		release = make(chan struct{})
		ids     []string
	)
	for i := 0; i < 6; i++ {
		for _, tenant := range []string{"acme", "zed"} {
			ids = append(ids, b.enqueue(backstop.EnqueueParams{Queue: "lim", Kind: "job", Attributes: map[string]string{"tenant": tenant}}).ID)
		}
	}
	h := backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
		tenant := task.Attributes["tenant"]
		mu.Lock()
		running[tenant]++
		most[tenant] = max(most[tenant], running[tenant])
		mu.Unlock()
		<-release
		mu.Lock()
		running[tenant]--
		mu.Unlock()
		return nil
	})
	for i := 0; i < 2; i++ {
		b.worker(&backstop.WorkerConfig{Queues: map[string]int{"lim": 10}, PollInterval: 20 * time.Millisecond}, map[string]backstop.Handler{"job": h})
	}
	testwait.For(t, "two tasks of each tenant running", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running["acme"] == 2 && running["zed"] == 2
	})
	waiting := 0
	for _, id := range ids {
		task := b.get(id)
		if task.State != backstop.StatePending {
			continue
		}
		waiting++
		want := "concurrency limit two-per-tenant tenant=" + task.Attributes["tenant"] + " 2/2"
		eq(t, "why "+id+" waits", task.Waiting, want)
		eq(t, "attempts of a waiting task", task.Attempt, 0)
	}
	eq(t, "waiting tasks", waiting, 8)
	ls, err := b.c.Limits(b.ctx)
	if err != nil || len(ls) != 1 {
		t.Fatalf("limits: %+v %v", ls, err)
	}
	eq(t, "in use", ls[0].InUse, 4)
	eq(t, "waiting", ls[0].Waiting, 8)
	eq(t, "scope", ls[0].Scope, "queue=lim kind=job per=tenant")
	close(release)
	for _, id := range ids {
		b.waitState(id, backstop.StateSucceeded)
	}
	mu.Lock()
	defer mu.Unlock()
	eq(t, "most running at once per tenant", most, map[string]int{"acme": 2, "zed": 2})
}

// claimIDs claims through the limited claim at the bundle's clock and
// returns how many it got, their attempts checked (one each: a task a
// limit held back earlier was not charged).
func (b *bundle) claimCount(queue string, n int) int {
	b.t.Helper()
	ts := b.claimLimited(queue, n)
	for _, task := range ts {
		eq(b.t, "attempt of a claimed task", task.Attempt, 1)
	}
	return len(ts)
}

// testRateBurstAndRefill: on a frozen clock, a rate limit of 2/s with a
// burst of 3 starts 3 at once, then one per half second; a fraction of a
// token starts nothing; a long quiet spell refills the burst, no more; the
// held-back tasks stay pending with no attempt charged, and say why.
func (s *suite) testRateBurstRefill(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.clock.freeze()
	if _, err := b.c.SetLimit(b.ctx, backstop.Limit{Name: "two", Queue: "q", Rate: 2, Burst: 3}, "ops"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 12; i++ {
		ids = append(ids, b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k"}).ID)
	}
	eq(t, "the burst", b.claimCount("q", 10), 3)
	eq(t, "with the bucket empty", b.claimCount("q", 10), 0)
	waiting := 0
	for _, id := range ids {
		if task := b.get(id); task.State == backstop.StatePending {
			waiting++
			eq(t, "why it waits", task.Waiting, "rate limit two 2/s")
			eq(t, "attempts of a waiting task", task.Attempt, 0)
		}
	}
	eq(t, "waiting", waiting, 9)
	ls, err := b.c.Limits(b.ctx)
	if err != nil || len(ls) != 1 || ls[0].Tokens == nil {
		t.Fatalf("limits: %+v %v", ls, err)
	}
	eq(t, "type", ls[0].Type, "rate")
	eq(t, "value", ls[0].Value, 2.0)
	eq(t, "burst", ls[0].Burst, 3)
	eq(t, "tokens", *ls[0].Tokens, 0.0)
	eq(t, "waiting on the limit", ls[0].Waiting, 9)
	b.clock.Advance(250 * time.Millisecond)
	eq(t, "half a token", b.claimCount("q", 10), 0)
	b.clock.Advance(250 * time.Millisecond)
	eq(t, "one token after half a second", b.claimCount("q", 10), 1)
	b.clock.Advance(time.Second)
	eq(t, "two tokens after a second", b.claimCount("q", 10), 2)
	b.clock.Advance(time.Hour)
	eq(t, "a quiet hour refills the burst, no more", b.claimCount("q", 10), 3)
	// The optimistic claim and the claim within the limits take tokens
	// alike: one at a time, as the bucket refills.
	for i := 0; i < 3; i++ {
		b.clock.Advance(500 * time.Millisecond)
		eq(t, "one per half second", b.claimCount("q", 1), 1)
	}
	eq(t, "none left at once", b.claimCount("q", 10), 0)
	// A clock that went back (another process's) refills nothing.
	b.clock.Advance(-time.Minute)
	eq(t, "an earlier clock", b.claimCount("q", 10), 0)
}

// testRatePerAttribute: each tenant has its own bucket; one tenant that
// spent its burst does not hold another back, and refills are per tenant.
func (s *suite) testRatePerAttribute(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.clock.freeze()
	if _, err := b.c.SetLimit(b.ctx, backstop.Limit{Name: "per-tenant", Queue: "q", Per: "tenant", Rate: 1}, "ops"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k", Attributes: map[string]string{"tenant": "acme"}})
	}
	got := b.claimLimited("q", 10)
	if len(got) != 1 || got[0].Attributes["tenant"] != "acme" {
		t.Fatalf("claimed %v, want one of acme (the default burst of 1/s is 1)", got)
	}
	// zed's tasks, enqueued after acme spent its token, start at once.
	zed := b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k", Attributes: map[string]string{"tenant": "zed"}})
	b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k", Attributes: map[string]string{"tenant": "zed"}})
	got = b.claimLimited("q", 10)
	if len(got) != 1 || got[0].ID != zed.ID {
		t.Fatalf("claimed %v, want zed's first task only", got)
	}
	eq(t, "both buckets empty", b.claimCount("q", 10), 0)
	ls, err := b.c.Limits(b.ctx)
	if err != nil || len(ls) != 1 {
		t.Fatalf("limits: %+v %v", ls, err)
	}
	eq(t, "burst default", ls[0].Burst, 1)
	eq(t, "waiting", ls[0].Waiting, 4)
	for _, u := range ls[0].Budgets {
		if u.Tokens == nil || *u.Tokens != 0 {
			t.Fatalf("budget %+v: want 0 tokens", u)
		}
	}
	b.clock.Advance(time.Second)
	tenants := map[string]int{}
	for _, task := range b.claimLimited("q", 10) {
		tenants[task.Attributes["tenant"]]++
	}
	eq(t, "a second later, one each", tenants, map[string]int{"acme": 1, "zed": 1})
}

// testRateAndConcurrency: a concurrency limit and a rate limit on one
// queue both bind; a task the concurrency limit refuses takes no token.
func (s *suite) testRateAndConcurrency(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.clock.freeze()
	for _, l := range []backstop.Limit{{Name: "conc2", Queue: "q", Concurrency: 2}, {Name: "rate1", Queue: "q", Rate: 1, Burst: 3}} {
		if _, err := b.c.SetLimit(b.ctx, l, "ops"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 8; i++ {
		b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k"})
	}
	got := b.claimLimited("q", 10)
	eq(t, "the concurrency limit binds", len(got), 2)
	pending, err := b.store.List(b.ctx, store.ListFilter{Queue: "q", States: []bt.State{backstop.StatePending}})
	if err != nil || len(pending) == 0 {
		t.Fatalf("pending: %d %v", len(pending), err)
	}
	eq(t, "why it waits (the first full limit by name)", b.get(pending[0].ID).Waiting, "concurrency limit conc2 2/2")
	ls, err := b.c.Limits(b.ctx)
	if err != nil || len(ls) != 2 || ls[1].Tokens == nil {
		t.Fatalf("limits: %+v %v", ls, err)
	}
	eq(t, "tokens left: two taken", *ls[1].Tokens, 1.0)
	for _, task := range got {
		settle(t, b, store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeSucceeded,
			FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
	}
	eq(t, "the rate limit binds: one token left", b.claimCount("q", 10), 1)
	eq(t, "why it waits now", b.get(pending[len(pending)-1].ID).Waiting, "rate limit rate1 1/s")
	b.clock.Advance(time.Second)
	eq(t, "one token a second later", b.claimCount("q", 10), 1)
	b.clock.Advance(10 * time.Second)
	eq(t, "the concurrency limit binds again (two run)", b.claimCount("q", 10), 0)
}

// testRateConcurrent: 8 claimers at once on a frozen clock share one
// bucket of 5: exactly 5 start, however the claims interleave.
func (s *suite) testRateConcurrent(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.clock.freeze()
	if _, err := b.c.SetLimit(b.ctx, backstop.Limit{Name: "five", Queue: "q", Rate: 5}, "ops"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k"})
	}
	var (
		total atomic.Int64
		wg    sync.WaitGroup
		errs  = make(chan error, 8)
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				ts, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "q", WorkerID: fmt.Sprint("w", w), Max: 2,
					Now: b.clock.Now(), Lease: time.Minute, Limited: true})
				if err != nil {
					errs <- err
					return
				}
				total.Add(int64(len(ts)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eq(t, "started in all", total.Load(), int64(5))
}
