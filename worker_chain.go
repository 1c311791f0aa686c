package backstop

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// A completer's settle batch that finishes workflow steps claims the steps
// it enqueues for this worker in its own transaction
// (engine.SettleChained, on a store with store.Features.PlanClaims): the
// next step of a linear workflow exists only once its predecessor's settle
// commits, and claimed the usual way it waits for that commit, its queue's
// wake-up and a claim of its own. The batch claims into the slots its
// attempts freed, reserved before it is sent (the fetch loop cannot take
// them meanwhile) and given back for what it did not claim; it reserves
// them only while its queue's last claim came back short (nothing else
// ready: the slot would wait for the wake-up anyway).

// chainGate admits such claims only while the worker claims: Stop closes
// it (then waits for a claim under way, which holds an attempt of
// execWG, and drains what it started), and once Stop released the running
// attempts, tasks a claim brings are released too instead of started.
type chainGate struct {
	mu       sync.Mutex
	fetch    context.Context // the fetch loops' context: the chained attempts' too
	off      bool            // Stop began
	released bool            // Stop released the running attempts
	started  atomic.Int64    // tasks started this way (tests)
}

// open readies the gate for a started worker.
func (g *chainGate) open(fetch context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fetch, g.off, g.released = fetch, false, false
}

// close stops admitting claims.
func (g *chainGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.off = true
}

// releasing marks the running attempts released (releaseRunning): a claim
// that ends after it releases its tasks.
func (g *chainGate) releasing() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.released = true
}

// enter admits a claim, counted in wg until the claim ended, unless Stop
// began.
func (g *chainGate) enter(wg *sync.WaitGroup) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.off {
		return false
	}
	wg.Add(1)
	return true
}

// chainRun is one settle batch's claim: the slots reserved for it, per
// queue, and how many of them its tasks took.
type chainRun struct {
	c        engine.Chain
	reserved map[*queueRunner]int
	started  map[*queueRunner]int
}

// param is the engine's Chain, nil for none.
func (r *chainRun) param() *engine.Chain {
	if r == nil {
		return nil
	}
	return &r.c
}

// reserve takes one of q's free slots, if it has one.
func (q *queueRunner) reserve() bool {
	for {
		n := q.inflight.Load()
		if int(n) >= q.claimable() {
			return false
		}
		if q.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// queueNamed is the worker's runner of queue, nil when it does not serve it.
func (w *Worker) queueNamed(queue string) *queueRunner {
	for _, q := range w.queues {
		if q.name == queue {
			return q
		}
	}
	return nil
}

// reserveChain reserves, for a batch holding workflow steps that end
// (succeeded, dead, canceled: their runs may enqueue the next steps), a
// slot of each such step's queue while one is free; nil when the store
// cannot claim so, the batch holds no such step, no slot is free, or the
// worker is stopping.
func (w *Worker) reserveChain(items []settleItem) *chainRun {
	if !w.c.store.Features().PlanClaims {
		return nil
	}
	var r *chainRun
	for i := range items {
		it := &items[i]
		switch it.s.State {
		case bt.StateSucceeded, bt.StateDead, bt.StateCanceled:
		default:
			continue
		}
		if strings.IndexByte(it.s.TaskID, '.') < 0 { // not a step (engine: mayBeSteps)
			continue
		}
		q := w.queueNamed(it.a.task.Queue)
		// Only while q's last claim came back short: nothing else is
		// waiting to be claimed, so the freed slot would idle until a
		// wake-up anyway. Otherwise the fetch loop fills it at once, and
		// holding it for the steps this settle enqueues would idle it for
		// the settle's length.
		if q == nil || !q.short.Load() || !q.reserve() {
			continue
		}
		if r == nil {
			r = &chainRun{c: engine.Chain{WorkerID: w.cfg.ID, Kinds: w.cfg.Kinds, Lease: w.cfg.Lease, Free: map[string]int{}},
				reserved: map[*queueRunner]int{}, started: map[*queueRunner]int{}}
		}
		r.c.Free[q.name]++
		r.reserved[q]++
	}
	if r != nil && !w.chain.enter(&w.execWG) {
		w.unreserve(r)
		return nil
	}
	return r
}

// unreserve gives back the slots r reserved and its tasks did not take.
func (w *Worker) unreserve(r *chainRun) {
	for q, n := range r.reserved {
		if left := n - r.started[q]; left > 0 {
			q.inflight.Add(-int32(left))
			signal(q.freed)
		}
	}
}

// endChain ends r's claim (flush's, once its settle is over).
func (w *Worker) endChain(r *chainRun) {
	if r == nil {
		return
	}
	w.unreserve(r)
	w.execWG.Done()
}

// startChained starts the tasks r's settle claimed, in its reserved
// slots; once Stop released the running attempts, it releases them
// instead (uncharged: they never started).
func (w *Worker) startChained(r *chainRun, claimed []*Task, bad map[*Task]error) {
	if r == nil || len(claimed) == 0 {
		return
	}
	w.chain.mu.Lock()
	if !w.chain.released {
		fetch := w.chain.fetch
		base := context.WithoutCancel(fetch)
		for _, t := range claimed {
			q := w.queueNamed(t.Queue) // one r reserved: the engine claims nowhere else
			r.started[q]++
			q.dry.Store(false)
			w.start(base, fetch, q, t, bad[t])
		}
		w.chain.mu.Unlock()
		w.chain.started.Add(int64(len(claimed)))
		w.touch()
		return
	}
	w.chain.mu.Unlock()
	now := w.now()
	rel := make([]store.Settlement, len(claimed))
	for i, t := range claimed {
		rel[i] = releaseSettlement(t, nil, "released on shutdown before it started (not charged)", now)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.c.e.Settle(ctx, rel); err != nil {
		w.log.Error("release on shutdown failed; leases will expire instead", "error", err, "tasks", len(rel))
	}
}
