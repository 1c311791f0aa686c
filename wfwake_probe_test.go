package backstop

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// BenchmarkWorkflowWakeProbe takes a step task's pickup apart: from the
// COMMIT of the settle that enqueued it (its predecessor's, timed when
// InTx returned) to the first wake-up of its queue the worker's Wakeups
// channel delivered after it, to the start of the claim that took it, the
// claim's return, and its handler's start. The store is wrapped (no
// change to the code measured): InTx's return, Wakeups' deliveries and
// Claim's calls are timed here. The worker and the workflow are
// BenchmarkWorkflowOverheadPairs' (the 5-step linear workflow, one worker
// at concurrency 8, poll 5 ms), in two modes: "round" is that benchmark's
// workflow round (100 runs started one after another while the worker
// drains); "batch" is its batch round (the 100 runs started by one
// RunWorkflows); "chain" starts one run and waits for its 5 steps before the
// next (nothing else ready: each step's pickup is the chain's latency).
// Reported: each stage's median (ms), claims per step task, tasks per
// claim, and woken/task: the share of step tasks whose claim began after
// a wake-up that followed the predecessor's commit (else a poll, a freed
// slot or a claim already under way took it).
//
//	go test -run '^$' -bench WorkflowWakeProbe -benchtime 3x .
func BenchmarkWorkflowWakeProbe(b *testing.B) {
	const runs, steps = 100, 5
	for _, db := range benchDBs {
		for _, mode := range []string{"round", "chain", "burst", "batch", "plain"} {
			b.Run(db.name+"/"+mode, func(b *testing.B) {
				ctx := context.Background()
				inner, _ := benchStore(b, db.url(b))
				p := &probeStore{Store: inner, commits: map[string]time.Time{}, claimAt: map[string][2]time.Time{}, handled: map[string]time.Time{}}
				c, err := NewClient(p, nil)
				if err != nil {
					b.Fatal(err)
				}
				applyLinear(b, c, steps)
				done := make(chan struct{}, runs*steps)
				prefetch, _ := strconv.Atoi(os.Getenv("BACKSTOP_PROBE_PREFETCH")) // claim ahead of free slots (WorkerConfig.Prefetch)
				w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"bench": 8}, PollInterval: 5 * time.Millisecond,
					MaintenanceInterval: -1, Prefetch: prefetch})
				if err != nil {
					b.Fatal(err)
				}
				w.Handle("noop", HandlerFunc(func(_ context.Context, t *Task) error {
					p.handler(t.ID)
					done <- struct{}{}
					return nil
				}))
				if err := w.Start(ctx); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { w.Stop(ctx) })
				wait := func(n int) {
					for j := 0; j < n; j++ {
						select {
						case <-done:
						case <-time.After(2 * time.Minute):
							b.Fatalf("only %d of %d tasks ran", j, n)
						}
					}
				}
				var loop, all time.Duration
				round := func() {
					start := time.Now()
					defer func() { all += time.Since(start) }()
					if mode == "plain" { // BenchmarkWorkflowOverheadPairs' plain round
						ps := make([]EnqueueParams, runs*steps)
						for j := range ps {
							ps[j] = EnqueueParams{Queue: "bench", Kind: "noop"}
						}
						if _, err := c.EnqueueMany(ctx, ps); err != nil {
							b.Fatal(err)
						}
						loop += time.Since(start)
						wait(runs * steps)
						return
					}
					if mode == "batch" { // BenchmarkWorkflowOverheadPairs' batch round
						ps := make([]RunWorkflowParams, runs)
						for j := range ps {
							ps[j] = RunWorkflowParams{Workflow: "linear"}
						}
						if _, err := c.RunWorkflows(ctx, ps); err != nil {
							b.Fatal(err)
						}
						loop += time.Since(start)
						wait(runs * steps)
						return
					}
					if mode == "burst" {
						// 100 starts from 10 goroutines: the starts are not
						// the round's bound (as a batch start would make it).
						var wg sync.WaitGroup
						for g := 0; g < 10; g++ {
							wg.Add(1)
							go func() {
								defer wg.Done()
								for r := 0; r < runs/10; r++ {
									if _, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "linear"}); err != nil {
										b.Error(err)
									}
								}
							}()
						}
						wg.Wait()
						loop += time.Since(start)
						wait(runs * steps)
						return
					}
					for r := 0; r < runs; r++ {
						if _, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "linear"}); err != nil {
							b.Fatal(err)
						}
						if mode == "chain" {
							wait(steps)
						}
					}
					if mode == "round" {
						loop += time.Since(start)
						wait(runs * steps)
					}
				}
				round() // warm
				p.reset()
				loop, all = 0, 0
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					round()
				}
				b.StopTimer()
				p.report(b, steps)
				if mode != "chain" {
					b.ReportMetric(loop.Seconds()/all.Seconds(), "starts/round")
				}
			})
		}
	}
}

// probeStore times a store's InTx returns (the step settles' commits),
// its Wakeups deliveries and its claims.
type probeStore struct {
	store.Store
	mu      sync.Mutex
	commits map[string]time.Time    // settled task id → its InTx's return
	claimAt map[string][2]time.Time // task id → its claim's start and return
	handled map[string]time.Time    // task id → handler start
	intx    []float64               // settle InTx durations (ms)
	batch   []int                   // settlements per settle InTx
	clog    []claimLog
	wakes   []time.Time // deliveries of queue "bench" (or all)
	claims  []int       // tasks per claim that returned any
	empty   int         // claims that returned none

	// A step settle's InTx split (ms): the transaction begun (the pool's
	// connection), LockRunsSettle (its round trip: BEGIN, the runs'
	// locks, the steps, the settle), the engine's work after it (the
	// plans; on Postgres their writes are held for the COMMIT), the
	// commit (the held writes, COMMIT, the wake-up: one round trip).
	spanBegin, spanLock, spanPlan, spanCommit []float64
}

func (p *probeStore) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.commits, p.claimAt, p.handled = map[string]time.Time{}, map[string][2]time.Time{}, map[string]time.Time{}
	p.wakes, p.claims, p.empty, p.intx, p.batch, p.clog = nil, nil, 0, nil, nil, nil
	p.spanBegin, p.spanLock, p.spanPlan, p.spanCommit = nil, nil, nil, nil
}

func (p *probeStore) handler(id string) {
	now := time.Now()
	p.mu.Lock()
	p.handled[id] = now
	p.mu.Unlock()
}

type probeTx struct {
	store.Tx
	settled *[]string
	locked  *time.Time // LockRunsSettle returned
}

func (t probeTx) Settle(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	for _, s := range ss {
		*t.settled = append(*t.settled, s.TaskID)
	}
	return t.Tx.Settle(ctx, ss)
}

// LockRunsSettle: a step settle's (the runs' locks and the settle in one
// call).
func (t probeTx) LockRunsSettle(ctx context.Context, runIDs []string, ss []store.Settlement) ([]store.LockedRun, []bool, error) {
	for _, s := range ss {
		*t.settled = append(*t.settled, s.TaskID)
	}
	l, oks, err := t.Tx.LockRunsSettle(ctx, runIDs, ss)
	*t.locked = time.Now()
	return l, oks, err
}

// Settle times the plain settles (no step among them: not in InTx).
func (p *probeStore) Settle(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	begin := time.Now()
	oks, err := p.Store.Settle(ctx, ss)
	if err == nil {
		now := time.Now()
		p.mu.Lock()
		p.intx = append(p.intx, float64(now.Sub(begin).Microseconds())/1000)
		p.batch = append(p.batch, len(ss))
		p.mu.Unlock()
	}
	return oks, err
}

func (p *probeStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	var settled []string
	var in, locked, out time.Time
	begin := time.Now()
	err := p.Store.InTx(ctx, func(tx store.Tx) error {
		in = time.Now()
		settled = settled[:0]
		err := fn(probeTx{tx, &settled, &locked})
		out = time.Now()
		return err
	})
	now := time.Now()
	if err == nil {
		p.mu.Lock()
		for _, id := range settled {
			p.commits[id] = now
		}
		if len(settled) > 0 {
			p.intx = append(p.intx, float64(now.Sub(begin).Microseconds())/1000)
			p.batch = append(p.batch, len(settled))
			if !locked.IsZero() {
				ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
				p.spanBegin = append(p.spanBegin, ms(in.Sub(begin)))
				p.spanLock = append(p.spanLock, ms(locked.Sub(in)))
				p.spanPlan = append(p.spanPlan, ms(out.Sub(locked)))
				p.spanCommit = append(p.spanCommit, ms(now.Sub(out)))
			}
		}
		p.mu.Unlock()
	}
	return err
}

func (p *probeStore) Wakeups(ctx context.Context) <-chan string {
	in := p.Store.Wakeups(ctx)
	out := make(chan string, 64)
	go func() {
		defer close(out)
		for q := range in {
			if q == "" || q == "bench" {
				now := time.Now()
				p.mu.Lock()
				p.wakes = append(p.wakes, now)
				p.mu.Unlock()
			}
			select {
			case out <- q:
			default:
			}
		}
	}()
	return out
}

func (p *probeStore) Claim(ctx context.Context, cp store.ClaimParams) ([]*bt.Task, error) {
	start := time.Now()
	ts, err := p.Store.Claim(ctx, cp)
	end := time.Now()
	p.mu.Lock()
	for _, t := range ts {
		p.claimAt[t.ID] = [2]time.Time{start, end}
	}
	p.clog = append(p.clog, claimLog{start, cp.Max, len(ts)})
	if len(ts) > 0 {
		p.claims = append(p.claims, len(ts))
	} else {
		p.empty++
	}
	p.mu.Unlock()
	return ts, err
}

type claimLog struct {
	start  time.Time
	max, n int
}

func (p *probeStore) report(b *testing.B, steps int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Claims that came back short (n < max) while step tasks were ready:
	// their predecessor had committed before the claim began, and no claim
	// begun earlier took them.
	short, shortReady, readyLeft, maxSum := 0, 0, 0, 0
	for _, c := range p.clog {
		maxSum += c.max
		if c.n >= c.max {
			continue
		}
		short++
		ready := 0
		for id, ca := range p.claimAt {
			run, step, ok := strings.Cut(id, ".")
			var k int
			if !ok || step == "s0" {
				continue
			}
			if _, err := fmt.Sscanf(step, "s%d", &k); err != nil {
				continue
			}
			tc, ok := p.commits[fmt.Sprintf("%s.s%d", run, k-1)]
			if ok && tc.Before(c.start) && ca[0].After(c.start) {
				ready++
			}
		}
		if ready > 0 {
			shortReady++
			readyLeft += ready
		}
	}
	if len(p.clog) > 0 {
		b.ReportMetric(float64(maxSum)/float64(len(p.clog)), "asked/claim")
		b.ReportMetric(float64(short)/float64(len(p.clog)), "short/claim")
	}
	if short > 0 {
		b.ReportMetric(float64(shortReady)/float64(short), "short_claims_with_ready_left")
		b.ReportMetric(float64(readyLeft)/float64(max(shortReady, 1)), "ready_left/short_claim")
	}
	wakes := slices.Clone(p.wakes)
	slices.SortFunc(wakes, func(a, b time.Time) int { return a.Compare(b) })
	var toWake, wakeToClaim, claim, toHandler, total, toClaim []float64
	n, woken, early := 0, 0, 0
	for id, h := range p.handled {
		run, step, ok := strings.Cut(id, ".")
		if !ok || step == "s0" {
			continue
		}
		var k int
		if _, err := fmt.Sscanf(step, "s%d", &k); err != nil {
			continue
		}
		tc, ok := p.commits[fmt.Sprintf("%s.s%d", run, k-1)]
		ca, ok2 := p.claimAt[id]
		if !ok || !ok2 {
			continue
		}
		n++
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		total = append(total, ms(h.Sub(tc)))
		claim = append(claim, ms(ca[1].Sub(ca[0])))
		toHandler = append(toHandler, ms(h.Sub(ca[1])))
		toClaim = append(toClaim, ms(ca[0].Sub(tc)))
		if ca[0].Before(tc) {
			early++ // the claim began before the settle's InTx returned
		}
		i, _ := slices.BinarySearchFunc(wakes, tc, func(a, b time.Time) int { return a.Compare(b) })
		if i < len(wakes) {
			toWake = append(toWake, ms(wakes[i].Sub(tc)))
			if !ca[0].Before(wakes[i]) {
				woken++
				wakeToClaim = append(wakeToClaim, ms(ca[0].Sub(wakes[i])))
			}
		}
	}
	med := func(xs []float64) float64 {
		if len(xs) == 0 {
			return -1
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	claimed := 0
	for _, c := range p.claims {
		claimed += c
	}
	b.ReportMetric(med(total), "commit→handler_ms")
	b.ReportMetric(med(toWake), "commit→wake_ms")
	b.ReportMetric(med(wakeToClaim), "wake→claim_ms")
	b.ReportMetric(med(claim), "claim_ms")
	b.ReportMetric(med(toClaim), "commit→claim_ms")
	b.ReportMetric(med(toHandler), "claimed→handler_ms")
	if n > 0 {
		b.ReportMetric(float64(woken)/float64(n), "woken/task")
		b.ReportMetric(float64(early)/float64(n), "claim<commit/task")
		b.ReportMetric(float64(len(p.claims)+p.empty)/float64(len(p.handled)), "claims/task")
	}
	if len(p.batch) > 0 {
		sum := 0
		for _, n := range p.batch {
			sum += n
		}
		b.ReportMetric(float64(sum)/float64(len(p.batch)), "tasks/settle")
		b.ReportMetric(med(p.intx), "settle_intx_ms")
	}
	if len(p.spanLock) > 0 {
		b.ReportMetric(med(p.spanBegin), "intx_begin_ms")
		b.ReportMetric(med(p.spanLock), "intx_lock_settle_ms")
		b.ReportMetric(med(p.spanPlan), "intx_plan_ms")
		b.ReportMetric(med(p.spanCommit), "intx_commit_ms")
	}
	if len(p.claims) > 0 {
		b.ReportMetric(float64(claimed)/float64(len(p.claims)), "tasks/claim")
	}
	slices.Sort(total)
	if len(total) > 0 {
		b.ReportMetric(total[len(total)*9/10], "commit→handler_p90_ms")
	}
}
