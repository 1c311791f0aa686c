package backstop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/probe"
	"github.com/backstophq/backstop/store"
	"go.opentelemetry.io/otel/trace"
)

// WorkerConfig configures a Worker. Zero values take the default named at the
// end of each field's comment.
type WorkerConfig struct {
	// ID names this worker in leases and executions. Default:
	// host-pid-random.
	ID string
	// Queues to work, with the concurrency of each (0: the queue's
	// configured concurrency, else 10). Required.
	Queues map[string]int
	// Kinds, when set, restricts claims to these kinds.
	Kinds []string
	// Lease is how long a claim lasts without a heartbeat. Default: 30s.
	Lease time.Duration
	// HeartbeatInterval. Default: Lease/3.
	HeartbeatInterval time.Duration
	// PollInterval is the fallback when no wake-up arrives. Default: 1s.
	PollInterval time.Duration
	// MaintenanceInterval: how often the maintenance leader settles expired
	// leases, promotes scheduled tasks and expires deadlines. Every worker
	// takes part in the election (one leader among all processes on the
	// store); negative keeps this worker out of it. Default: 1s.
	MaintenanceInterval time.Duration
	// LeaderTTL: how long the maintenance leadership lasts without renewal
	// (renewed every LeaderTTL/3). When the leader dies another worker takes
	// over within about this long; a graceful Stop hands over at once.
	// Default: 15s.
	LeaderTTL time.Duration
	// NoHandlerGrace: a task whose kind has no handler waits this long
	// (from its creation) for a worker that knows it, then dead-letters as
	// poison. Default: 5m.
	NoHandlerGrace time.Duration
	// TimeoutGrace: how long a handler may keep running after its context
	// ended on a timeout before the attempt is settled without it.
	// Default: 5s.
	TimeoutGrace time.Duration
	// FetchCooldown: when only a few slots are free, wait this long for more
	// before claiming, so claims come in batches. Default: 2ms.
	FetchCooldown time.Duration
	// Labels describe this worker in the registry (GET /v1/workers).
	Labels map[string]string
	// Version is this worker's software version in the registry.
	Version string
	// Prefetch: per queue, how many tasks the worker claims beyond its
	// free slots (at most the queue's concurrency), so that a slot that
	// frees starts its next task without waiting for a claim. It claims
	// ahead only while the queue's handlers run short (their recent mean
	// under PrefetchMaxRun, measured once some have finished), so a task
	// claimed ahead waits for a slot briefly instead of a long task's
	// run while other workers are free. A task claimed ahead is leased
	// and heartbeated like a running one (its attempt is recorded and
	// counted as running) but its handler starts only once a slot is
	// free. When the worker stops, the tasks it has not started are
	// released at once without charging an attempt (the release is
	// recorded); when the process dies, their leases expire like those
	// of running tasks. Default: 0 (claim only for free slots).
	Prefetch int
	// SettleParallelism: how many completers write settle batches at
	// once. Default: the store's (store.Features.SettleParallelism: 2 on
	// Postgres, 1 on SQLite). One makes bigger batches on fewer
	// connections: the exec worker's choice, whose batches are small.
	SettleParallelism int
	// WatchEmpty: the worker notices when its queues have run dry and
	// closes the channel Empty returns (it goes on working until Stop).
	// A queue is dry once a claim on it finds nothing claimable while
	// none of its tasks is running or claimed ahead; after a claim that
	// came back short, the worker claims once more when its last task
	// finishes instead of waiting for a wake-up. A task that is not
	// claimable at that moment (scheduled for later, held back by a
	// concurrency or rate limit, behind its ordering key) does not keep a
	// queue from being dry. Default: false.
	WatchEmpty bool
}

func (c *WorkerConfig) withDefaults() *WorkerConfig {
	out := *c
	out.ID = cmp.Or(out.ID, defaultID())
	out.Lease = cmp.Or(c.Lease, 30*time.Second)
	out.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, out.Lease/3)
	out.PollInterval = cmp.Or(c.PollInterval, time.Second)
	out.MaintenanceInterval = cmp.Or(c.MaintenanceInterval, time.Second)
	out.LeaderTTL = cmp.Or(c.LeaderTTL, 15*time.Second)
	out.NoHandlerGrace = cmp.Or(c.NoHandlerGrace, 5*time.Minute)
	out.TimeoutGrace = cmp.Or(c.TimeoutGrace, 5*time.Second)
	out.FetchCooldown = cmp.Or(c.FetchCooldown, 2*time.Millisecond)
	return &out
}

// Causes that end an attempt's context, beside the engine's (ErrTimeout,
// ErrDeadline, ErrTaskCanceled, ErrAbandoned).
var (
	errLeaseLost   = errors.New("lease lost")
	errShutdown    = errors.New("worker shutting down")
	errPanicPrefix = "handler panic: "
	errGoexit      = errors.New("handler ended its goroutine (runtime.Goexit) without returning")
)

// Worker claims tasks from its queues and runs their handlers.
type Worker struct {
	c        *Client
	cfg      *WorkerConfig
	log      *slog.Logger
	handlers atomic.Pointer[handlerSet] // what Handle, HandleDefault and Use registered (worker_handlers.go)

	mu      sync.Mutex
	running map[*workerAttempt]struct{} // the attempts in progress (a pointer hashes cheaper than an id)
	started bool

	queues   []*queueRunner
	settleCh chan settleItem
	logs     *logFlusher // execution logs, written in batches (logs.go)

	fetchCancel    context.CancelFunc
	bgCancel       context.CancelFunc
	fetchWG        sync.WaitGroup
	bgWG           sync.WaitGroup
	execWG         sync.WaitGroup
	completersDone chan struct{}

	lastActive atomic.Int64  // unix nanos of the last claim or finished attempt
	claiming   atomic.Int32  // claims on their way to the store
	takeMu     sync.Mutex    // held by the completer taking a batch (completer)
	flushing   atomic.Int32  // completers writing a batch
	flushed    chan struct{} // signaled when a completer has written its batch
	fillWait   time.Duration // completerFillWait; tests lengthen it

	now func() time.Time // w.c.now, as a func value made once (a method value allocates)

	claimParallelism int // claims at once when many slots are free (claim)

	empty     chan struct{} // closed once every queue is dry (WorkerConfig.WatchEmpty); nil without it
	emptyOnce sync.Once

	maint *Maintainer // the worker's part in the elections (maintainer.go); nil: none
}

type queueRunner struct {
	name        string
	concurrency int
	prefetch    int           // tasks claimed beyond the free slots (WorkerConfig.Prefetch)
	slots       chan struct{} // with prefetch: a token per running handler, concurrency at most
	inflight    atomic.Int32  // claimed and not yet done: running, and waiting for a slot
	meanRun     atomic.Int64  // with prefetch: recent mean handler run (ns, moving average); 0: none finished yet
	dry         atomic.Bool   // with WatchEmpty: the last claim found nothing while nothing was in flight
	wake        chan struct{}
	freed       chan struct{}
	probe       probe.Sink // the latency bench's stage probe (internal/probe), from the start context; nil: none
	short       bool       // the fetch loop's last claim came back short (claim: not split)
}

// PrefetchMaxRun is the mean handler run under which a worker with
// WorkerConfig.Prefetch claims ahead of its free slots.
const PrefetchMaxRun = time.Second

// claimable is how many tasks q may hold at once: running, and claimed
// ahead of a free slot while its handlers run short.
func (q *queueRunner) claimable() int {
	if m := q.meanRun.Load(); q.prefetch > 0 && m > 0 && m < int64(PrefetchMaxRun) {
		return q.concurrency + q.prefetch
	}
	return q.concurrency
}

// ran folds a handler's run into q's moving average (weight 1/8).
func (q *queueRunner) ran(d time.Duration) {
	n := max(int64(d), 1)
	for {
		m := q.meanRun.Load()
		next := n
		if m > 0 {
			next = max(m+(n-m)/8, 1)
		}
		if q.meanRun.CompareAndSwap(m, next) {
			return
		}
	}
}

// NewWorker makes a worker; register handlers with Handle, then Start.
func NewWorker(c *Client, cfg *WorkerConfig) (*Worker, error) {
	if cfg == nil || len(cfg.Queues) == 0 {
		return nil, errors.New("backstop: worker needs at least one queue")
	}
	wc := cfg.withDefaults()
	if wc.Lease < time.Second {
		return nil, fmt.Errorf("backstop: lease %s is shorter than 1s", wc.Lease)
	}
	if wc.LeaderTTL < 100*time.Millisecond {
		return nil, fmt.Errorf("backstop: leader TTL %s is shorter than 100ms", wc.LeaderTTL)
	}
	if wc.Prefetch < 0 || wc.SettleParallelism < 0 {
		return nil, fmt.Errorf("backstop: negative prefetch %d or settle parallelism %d", wc.Prefetch, wc.SettleParallelism)
	}
	if wc.HeartbeatInterval >= wc.Lease {
		return nil, fmt.Errorf("backstop: heartbeat interval %s must be shorter than the lease %s", wc.HeartbeatInterval, wc.Lease)
	}
	w := &Worker{
		c: c, cfg: wc, running: map[*workerAttempt]struct{}{},
		settleCh: make(chan settleItem, settleQueue),
		log:      c.cfg.Logger.With("worker_id", wc.ID),
		now:      c.now,

		claimParallelism: max(1, c.store.Features().ClaimParallelism),
		fillWait:         completerFillWait,
		flushed:          make(chan struct{}, 1),
	}
	if wc.WatchEmpty {
		w.empty = make(chan struct{})
	}
	if wc.MaintenanceInterval > 0 {
		m, err := c.NewMaintainer(&MaintainerConfig{ID: wc.ID, Interval: wc.MaintenanceInterval, LeaderTTL: wc.LeaderTTL})
		if err != nil {
			return nil, err
		}
		w.maint = m
	}
	for name, conc := range wc.Queues {
		if err := engine.ValidName(name); err != nil {
			return nil, fmt.Errorf("backstop: queue %q: %w", name, err)
		}
		if conc < 0 {
			return nil, fmt.Errorf("backstop: queue %q: negative concurrency", name)
		}
		if conc == 0 {
			conc = cmp.Or(c.cfg.Queues[name].Concurrency, 10)
		}
		q := &queueRunner{name: name, concurrency: conc, prefetch: min(wc.Prefetch, conc),
			wake: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
		if q.prefetch > 0 {
			q.slots = make(chan struct{}, conc)
		}
		w.queues = append(w.queues, q)
	}
	return w, nil
}

// ID is the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle registers the handler of a kind.
func (w *Worker) Handle(kind string, h Handler) {
	w.updateHandlers(func(hs *handlerSet) { hs.byKind[kind] = h })
}

// HandleDefault registers the handler of every kind that has none of its
// own (a catch-all, as the exec worker uses). Without it such tasks wait
// NoHandlerGrace for a worker that knows their kind, then dead-letter.
func (w *Worker) HandleDefault(h Handler) {
	w.updateHandlers(func(hs *handlerSet) { hs.fallback = h })
}

// Use adds middleware around every handler (first added is outermost).
func (w *Worker) Use(mw ...Middleware) {
	w.updateHandlers(func(hs *handlerSet) { hs.mw = append(hs.mw, mw...) })
}

// Running is the number of attempts in progress.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// IdleFor is how long since this worker last claimed or finished a task
// (zero while attempts are running, and while a claim is on its way: a
// slow store's claim may yet bring tasks).
func (w *Worker) IdleFor() time.Duration {
	if w.Running() > 0 || w.claiming.Load() > 0 {
		return 0
	}
	return time.Since(time.Unix(0, w.lastActive.Load()))
}

// Empty is closed once every queue of the worker has run dry
// (WorkerConfig.WatchEmpty: a claim found nothing claimable while none of
// the queue's tasks was running or claimed ahead). It stays closed; the
// worker keeps working until Stop, which still drains what a later claim
// brought. Nil (never ready) without WatchEmpty.
func (w *Worker) Empty() <-chan struct{} { return w.empty }

// claimed records whether q's claim found nothing while nothing was in
// flight (idle: before the claim; only q's fetch loop starts tasks), and
// closes w.empty once every queue is dry.
func (w *Worker) claimed(q *queueRunner, idle bool, n int) {
	if w.empty == nil {
		return
	}
	dry := idle && n == 0
	q.dry.Store(dry)
	if !dry {
		return
	}
	for _, r := range w.queues {
		if !r.dry.Load() {
			return
		}
	}
	w.emptyOnce.Do(func() { close(w.empty) })
}

func (w *Worker) touch() { w.lastActive.Store(time.Now().UnixNano()) }

// Start launches the worker's loops. It returns at once.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("backstop: worker already started")
	}
	w.started = true
	w.mu.Unlock()
	w.touch()
	w.register(ctx)
	w.warm(ctx)

	bgCtx, bgCancel := context.WithCancel(context.WithoutCancel(ctx))
	fetchCtx, fetchCancel := context.WithCancel(bgCtx)
	w.bgCancel, w.fetchCancel = bgCancel, fetchCancel
	w.completersDone = make(chan struct{})
	w.startCompleters()
	w.logs = newLogFlusher(w.c.store, w.log, w.c.Masker())

	wakeups := w.c.store.Wakeups(bgCtx)
	w.bgWG.Add(1)
	go func() {
		defer w.bgWG.Done()
		for q := range wakeups {
			for _, r := range w.queues {
				if q == "" || r.name == q {
					signal(r.wake)
				}
			}
		}
	}()
	w.bgWG.Add(1)
	go w.heartbeatLoop(bgCtx)
	if w.maint != nil {
		if err := w.maint.Start(bgCtx); err != nil {
			return err
		}
	}
	for _, q := range w.queues {
		w.fetchWG.Add(1)
		go w.fetchLoop(fetchCtx, q)
	}
	return nil
}

// warmTimeout bounds the warm-up of a worker's connections at Start.
const warmTimeout = 2 * time.Second

// warm readies the store's connections for the worker's first claims when
// the store can (store.Warmer: Postgres): as many as its claims and
// settles use at once, two claims of each queue's claim parts side by side
// and the completers' settles. A failure is logged: the first claim meets
// (and reports) whatever made it.
func (w *Worker) warm(ctx context.Context) {
	wm, ok := w.c.store.(store.Warmer)
	if !ok || len(w.queues) == 0 {
		return
	}
	f := w.c.store.Features()
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	if err := wm.Warm(ctx, w.queues[0].name, 2*f.ClaimParallelism+f.SettleParallelism); err != nil {
		w.log.Warn("warming the store's connections failed", "error", err)
	}
}

// Stop drains the worker: it stops claiming, lets running handlers finish
// until ctx ends (the grace period), then releases the attempts still running
// without charging them, and returns once every loop has ended.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started {
		w.mu.Unlock()
		return nil
	}
	w.mu.Unlock()
	w.setRegistryState(store.WorkerStopping)
	w.fetchCancel()
	w.fetchWG.Wait()

	done := make(chan struct{})
	go func() { w.execWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		w.releaseRunning()
		// Give released handlers a moment to observe their context.
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	}
	w.bgCancel()
	if w.maint != nil {
		w.maint.Stop()
	}
	w.bgWG.Wait()
	close(w.settleCh)
	<-w.completersDone
	w.logs.close()
	w.setRegistryState(store.WorkerStopped)
	w.mu.Lock()
	w.started = false
	w.mu.Unlock()
	return nil
}

// Run starts the worker and drains it when ctx ends, allowing grace for
// running handlers to finish.
func (w *Worker) Run(ctx context.Context, grace time.Duration) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return w.Stop(stopCtx)
}

func (w *Worker) releaseRunning() {
	now := w.c.now()
	w.mu.Lock()
	var (
		rel []store.Settlement
		as  []*attempt
	)
	for wa := range w.running {
		a := &wa.attempt
		a.mu.Lock()
		a.released = true
		prog := a.progress
		a.mu.Unlock()
		w.cancelAttempt(wa, errShutdown)
		rel = append(rel, releaseSettlement(a.task, prog, "released on shutdown (not charged)", now))
		as = append(as, a)
	}
	w.mu.Unlock()
	if len(rel) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	oks, err := w.c.e.Settle(ctx, rel)
	if err != nil {
		w.log.Error("release on shutdown failed; leases will expire instead", "error", err, "tasks", len(rel))
		return
	}
	w.log.Info("released running tasks on shutdown", "tasks", len(rel))
	for i, a := range as {
		if i < len(oks) && oks[i] {
			// The attempt's span and start are its goroutine's: the
			// event takes the start from the task, and no span.
			w.c.telemetry.SettledEvent(nil, a.task, time.Time{}, &rel[i])
		}
	}
}

// releaseSettlement gives t's lease back without charging the attempt:
// the task is pending again at once, and the release is recorded.
func releaseSettlement(t *Task, prog *Progress, why string, now time.Time) store.Settlement {
	return store.Settlement{
		TaskID: t.ID, ExecutionID: t.ExecutionID, Outcome: bt.OutcomeReleased,
		Error: why, FinishedAt: now, State: bt.StatePending, RunAt: now, Uncharged: true, Progress: prog,
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (w *Worker) fetchLoop(ctx context.Context, q *queueRunner) {
	defer w.fetchWG.Done()
	poll := time.NewTimer(w.cfg.PollInterval)
	defer poll.Stop()
	// token fires when a rate limit that cut the last claim short has a
	// token again (stopped otherwise).
	token := time.NewTimer(time.Hour)
	token.Stop()
	defer token.Stop()
	empty := false // last claim found fewer tasks than asked for
	backoff := time.Duration(0)
	base := context.WithoutCancel(ctx) // the attempts' (start)
	q.probe = probe.SinkFrom(ctx)      // before the attempts' goroutines read it
	for ctx.Err() == nil {
		avail := q.claimable() - int(q.inflight.Load())
		if avail > 0 && !empty {
			// The claim must not be cut off by Stop: a claim that committed
			// but whose rows were lost to the cancellation would leave its
			// tasks running with nobody to heartbeat, release or settle them
			// until their leases expire (charged as lease_expired). Claimed
			// tasks are started and drained like the others.
			idle := q.inflight.Load() == 0
			claimAt := w.c.e.Now() // a rate budget short then may have cut it short
			got, short, err := w.claimStep(ctx, base, q, avail)
			if err != nil && got == 0 {
				if ctx.Err() != nil {
					return
				}
				backoff = min(max(backoff*2, 50*time.Millisecond), 5*time.Second)
				w.log.Error("claim failed", "queue", q.name, "error", err, "retry_in", backoff)
				w.c.e.Sleep(ctx, backoff)
				continue
			}
			backoff = 0
			q.short = short
			w.claimed(q, idle, got)
			if short {
				empty = true
				if d, ok := w.c.e.NextTokenWait(ctx, q.name, claimAt, w.cfg.PollInterval); ok {
					token.Reset(d)
				}
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
			empty = false
		case <-poll.C:
			empty = false
			poll.Reset(w.cfg.PollInterval)
		case <-token.C:
			empty = false
		case <-q.freed:
			// A finished ordered task may free its key; with WatchEmpty,
			// the last task's end is when to find out whether q is dry.
			if empty && !w.c.e.Ordered(q.name) && (w.empty == nil || q.inflight.Load() > 0) {
				continue
			}
			empty = false
			// Let a few more slots free up so claims come in batches.
			if q.claimable()-int(q.inflight.Load()) < max(q.claimable()/2, 1) {
				w.c.e.Sleep(ctx, w.cfg.FetchCooldown)
			}
		}
	}
}

// claimStep claims up to avail tasks of q and starts them, and reports how
// many it started, whether every claim it ran came back short, and the
// error of a claim that failed (the tasks of another were started).
//
// After a short claim (the queue caught up: q.short) with many slots free
// (2 × minClaimPart: each half is still a large batch, so a burst is not
// cut to half of what a small worker could take), the step claims half
// of avail and keeps the other half for a wake-up that comes while that
// claim is in flight: a task committed just after the claim read the
// queue would otherwise wait for the claim's round trip and commit and
// then for a whole claim of its own. The second claim runs beside the
// first (SKIP LOCKED: they take different tasks) and each hands its tasks
// over as it returns. A wake-up that finds no half left is kept for the
// fetch loop's next claim.
func (w *Worker) claimStep(ctx, base context.Context, q *queueRunner, avail int) (got int, short bool, err error) {
	type result struct {
		tasks []*Task
		bad   map[*Task]error
		err   error
		asked int
	}
	done := make(chan result, 2)
	launch := func(n int) {
		w.claiming.Add(1)
		go func() {
			claimCtx, cancelClaim := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancelClaim()
			claimCtx, pc := probe.StartClaim(claimCtx, q.probe)
			tasks, bad, err := w.claim(claimCtx, q, n)
			if pc != nil {
				q.probe.Claimed(pc.Return(tasks))
			}
			if len(tasks) > 0 {
				w.touch() // before the claim stops counting: no idle gap between them
			}
			w.claiming.Add(-1)
			done <- result{tasks, bad, err, n}
		}()
	}
	first, spare := avail, 0
	if q.short && avail >= 2*minClaimPart {
		first, spare = avail-avail/2, avail/2
	}
	launch(first)
	short, woken := true, false
	for pending := 1; pending > 0; {
		select {
		case r := <-done:
			pending--
			if r.err != nil && err == nil {
				err = r.err
			}
			if len(r.tasks) >= r.asked {
				short = false
			}
			for _, t := range r.tasks {
				q.inflight.Add(1)
				if q.probe != nil {
					q.probe.Task(t.ID, probe.Handed, time.Now())
				}
				w.start(base, ctx, q, t, r.bad[t])
			}
			got += len(r.tasks)
		case <-q.wake:
			if spare > 0 && ctx.Err() == nil {
				launch(spare)
				spare, pending = 0, pending+1
			} else {
				woken = true
			}
		}
	}
	if woken {
		signal(q.wake) // for the fetch loop's next claim
	}
	if err != nil && got > 0 {
		// The other claim's tasks are started; the next claim meets the
		// error again if it lasts.
		w.log.Error("claim failed", "queue", q.name, "error", err, "claimed_by_the_other", got)
		err = nil
	}
	return got, short, err
}

// claim claims up to n tasks of q: as one claim, or, when n is large, the
// store claims well side by side (store.Features.ClaimParallelism) and q's
// last claim came back full, as that many claims at once of an equal share
// each (none below minClaimPart), so that the claim's statements run on
// several connections instead of one after the other. After a short claim
// (the queue caught up) the parts would find a few tasks between them and
// the claim would return when the slower part did: one claim hands its
// tasks over as soon as its statement commits. Each part is a claim of its
// own: in claim order within itself, with its own task.claimed event row.
// Tasks any part claimed are returned (they are leased and must be
// started); an error of another part is then logged, and the next claim
// meets it again if it lasts.
func (w *Worker) claim(ctx context.Context, q *queueRunner, n int) ([]*Task, map[*Task]error, error) {
	parts := min(w.claimParallelism, n/minClaimPart)
	if parts <= 1 || q.short {
		return w.c.e.Claim(ctx, engine.ClaimParams{
			Queue: q.name, Kinds: w.cfg.Kinds, WorkerID: w.cfg.ID, Max: n, Lease: w.cfg.Lease,
		})
	}
	type part struct {
		tasks []*Task
		bad   map[*Task]error
		err   error
	}
	res := make([]part, parts)
	var wg sync.WaitGroup
	for i := range parts {
		share := n / parts
		if i < n%parts {
			share++
		}
		wg.Go(func() {
			r := &res[i]
			r.tasks, r.bad, r.err = w.c.e.Claim(ctx, engine.ClaimParams{
				Queue: q.name, Kinds: w.cfg.Kinds, WorkerID: w.cfg.ID, Max: share, Lease: w.cfg.Lease,
			})
		})
	}
	wg.Wait()
	var (
		tasks []*Task
		bad   map[*Task]error
		err   error
	)
	for _, r := range res {
		tasks = append(tasks, r.tasks...)
		for t, e := range r.bad {
			if bad == nil {
				bad = make(map[*Task]error)
			}
			bad[t] = e
		}
		if err == nil {
			err = r.err
		}
	}
	if len(tasks) > 0 {
		if err != nil {
			w.log.Error("claim failed", "queue", q.name, "error", err, "claimed_by_other_parts", len(tasks))
		}
		return tasks, bad, nil
	}
	return nil, nil, err
}

// start registers the attempt (so heartbeats cover it) and runs it on a
// goroutine of its own, the one its handler runs on. base is the fetch
// context without its cancellation: attempts outlive it, and shutdown ends
// them by cause. fetch is the fetch context: once it ends, a task claimed
// ahead that has no slot yet is released instead of run. inputErr: the
// task's payload could not be completed (stepInputs); it fails without
// reaching a handler.
func (w *Worker) start(base, fetch context.Context, q *queueRunner, t *Task, inputErr error) {
	actx, cancel := context.WithCancelCause(base)
	wa := &workerAttempt{attempt: attempt{task: t, cancel: cancel, wlog: w.log, inputErr: inputErr},
		elog: execLog{task: t, sink: w.logs, now: w.now}, q: q, actx: actx, fetch: fetch}
	a := &wa.attempt
	a.elog = &wa.elog
	w.mu.Lock()
	w.running[wa] = struct{}{}
	w.mu.Unlock()
	w.execWG.Add(1)
	go w.runAttempt(wa)
}

// runAttempt waits for a slot (with prefetch) and runs the attempt.
func (w *Worker) runAttempt(wa *workerAttempt) {
	q, a := wa.q, &wa.attempt
	if q.probe != nil {
		q.probe.Task(a.task.ID, probe.Running, time.Now())
	}
	if q.slots != nil {
		if !w.waitSlot(wa.actx, wa.fetch, q, a) {
			w.ended(wa)
			return
		}
		wa.slot, wa.began = true, time.Now()
	}
	if w.execute(wa.actx, wa) {
		w.ended(wa)
	}
}

// ended is the end of an attempt for the worker, once: its slot and its
// place among the running are free. Its handler may still be running
// (abandoned after its context ended: execute).
func (w *Worker) ended(wa *workerAttempt) {
	q := wa.q
	if wa.slot {
		q.ran(time.Since(wa.began))
		<-q.slots
	}
	w.mu.Lock()
	delete(w.running, wa)
	if len(w.running) == 0 {
		// IdleFor counts from the end of the last attempt running: one
		// clock read when the worker runs out of attempts, not one for
		// every attempt. Under mu, so that IdleFor, which finds none
		// running under mu too, reads this time and not an older one.
		w.touch()
	}
	w.mu.Unlock()
	q.inflight.Add(-1)
	signal(q.freed)
	w.execWG.Done()
}

// waitSlot holds a task claimed ahead until one of q's slots is free, and
// reports whether it got one. Otherwise the attempt is settled here
// without running its handler: released uncharged when the worker stops
// claiming first (it never started), decided by its context's cause when
// that ends first (a cancel, a lost lease, shutdown).
func (w *Worker) waitSlot(actx, fetch context.Context, q *queueRunner, a *attempt) bool {
	select {
	case q.slots <- struct{}{}:
		return true
	default:
	}
	select {
	case q.slots <- struct{}{}:
		if fetch.Err() == nil {
			return true
		}
		<-q.slots // the worker stopped claiming while this task waited
	case <-fetch.Done():
	case <-actx.Done():
		cause := context.Cause(actx)
		if errors.Is(cause, errLeaseLost) {
			a.log().Warn("lease lost before the attempt started")
			w.c.telemetry.LeaseLost(a.span)
			return false
		}
		w.settle(a, w.decide(cause, cause, a))
		return false
	}
	w.settle(a, releaseSettlement(a.task, nil, "released on shutdown before it started (not charged)", w.now()))
	return false
}

func taskLogger(l *slog.Logger, t *Task) *slog.Logger {
	return l.With(engine.TaskLogAttrs(t)...)
}

// execute runs the attempt's handler on the calling goroutine and settles
// it, and reports whether the attempt ended here. Once the handler's context
// ends, the handler has TimeoutGrace to return; if it has not by then, the
// attempt is settled without it (ErrAbandoned) and ended by the timer
// (execute reports false when the handler returns at last: its result is
// dropped). A handler that returns in time is waited for on no goroutine
// but its own.
func (w *Worker) execute(ctx context.Context, wa *workerAttempt) bool {
	a := &wa.attempt
	t := a.task
	if a.inputErr != nil {
		w.settle(a, w.decide(a.inputErr, nil, a))
		return true
	}
	h := w.handlerFor(t.Kind)
	if h == nil {
		w.settle(a, w.c.e.NoHandler(t, w.cfg.NoHandlerGrace))
		return true
	}
	ctx, a.span = w.c.telemetry.StartProcess(ctx, t)
	a.started = w.c.now()
	w.c.telemetry.Started(ctx, t, a.span)
	a.ctx = attemptCtx{Context: ctx, a: a} // context.WithValue(ctx, attemptKey{}, a), allocated with a (handler.go)
	ctx = &a.ctx
	if t.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(t.Timeout), engine.ErrTimeout)
		defer cancel()
	}
	if t.Deadline != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, *t.Deadline, engine.ErrDeadline)
		defer cancel()
	}
	// The context ends by cancelAttempt, or by the timer of a timeout or
	// deadline (watched here): either starts the grace.
	wa.handlerCtx = ctx
	var stop func() bool
	if ctx != &a.ctx {
		stop = context.AfterFunc(ctx, func() { w.abandonAfterGrace(wa) })
	}
	wa.working.Store(true)
	if ctx.Err() != nil {
		w.abandonAfterGrace(wa) // canceled before working: cancelAttempt may have seen working false
	}
	returned := false
	defer func() {
		if !returned && wa.over.CompareAndSwap(false, true) {
			w.finish(ctx, a, errGoexit) // the goroutine ends after this
			w.ended(wa)
		}
	}()
	res := w.work(ctx, h, a)
	returned = true
	if stop != nil {
		stop()
	}
	if !wa.over.CompareAndSwap(false, true) {
		return false // abandoned: settled and ended without it
	}
	w.finish(ctx, a, res)
	return true
}

// cancelAttempt ends the attempt's context with cause; once its handler
// is working, the handler has TimeoutGrace to return.
func (w *Worker) cancelAttempt(wa *workerAttempt, cause error) {
	wa.cancel(cause)
	if wa.working.Load() {
		w.abandonAfterGrace(wa)
	}
}

// abandonAfterGrace settles and ends the attempt without its handler
// unless the handler returns within TimeoutGrace (its context has ended).
// Armed once.
func (w *Worker) abandonAfterGrace(wa *workerAttempt) {
	if !wa.armed.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(w.cfg.TimeoutGrace, func() {
		if wa.over.CompareAndSwap(false, true) {
			w.finish(wa.handlerCtx, &wa.attempt, engine.ErrAbandoned)
			w.ended(wa)
		}
	})
}

// work runs the handler, a panic being its error.
func (w *Worker) work(ctx context.Context, h Handler, a *attempt) (res error) {
	defer func() {
		if r := recover(); r != nil {
			RecordDetail(ctx, string(debug.Stack()))
			res = fmt.Errorf("%s%v", errPanicPrefix, r)
		}
	}()
	return h.Work(ctx, a.task)
}

// finish settles an attempt whose handler returned res (or was abandoned)
// under ctx: decided by the result and what ended the context, or dropped
// when the lease was lost.
func (w *Worker) finish(ctx context.Context, a *attempt, res error) {
	cause := context.Cause(ctx)
	if ctx.Err() == nil {
		cause = nil
	}
	if errors.Is(cause, errLeaseLost) {
		a.log().Warn("lease lost; attempt result dropped", "result", errString(res))
		w.c.telemetry.LeaseLost(a.span)
		return
	}
	w.settle(a, w.decide(res, cause, a))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// decide is the engine's decision on an in-process attempt.
func (w *Worker) decide(res, cause error, a *attempt) store.Settlement {
	prog, detail := a.snapshot()
	result, refused := a.resultOf()
	return w.c.e.Decide(engine.Report{Task: a.task, Err: res, Cause: cause, Result: result, ResultErr: refused,
		Progress: prog, Detail: detail})
}

func (w *Worker) settle(a *attempt, s store.Settlement) {
	// Holding a.mu until the settlement is queued means releaseRunning
	// either sees it done or marks the attempt released before it is sent:
	// once Stop has released the running attempts, nothing sends any more
	// and the channel can be closed.
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		w.c.telemetry.LeaseLost(a.span)
		return
	}
	if a.started.IsZero() {
		a.started = s.FinishedAt
	}
	switch s.State {
	case bt.StateDead:
		a.log().Warn("task dead-lettered", "reason", s.DeadReason, "outcome", s.Outcome, "error", s.Error)
	case bt.StateScheduled, bt.StatePending:
		if s.Outcome != bt.OutcomeSnoozed && s.Outcome != bt.OutcomeReleased {
			a.log().Info("attempt failed; retry scheduled", "outcome", s.Outcome, "error", s.Error, "run_at", s.RunAt)
		}
	}
	w.settleCh <- settleItem{s: s, a: a}
}

// settleItem is a settlement and its attempt (for its telemetry, recorded
// once the settlement applied: worker_telemetry.go).
type settleItem struct {
	s store.Settlement
	a *attempt
}

func (w *Worker) flush(items []settleItem, scratch *[]store.Settlement) {
	batch := settlements(items, scratch)
	backoff := 50 * time.Millisecond
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		oks, err := w.c.e.Settle(ctx, batch)
		cancel()
		if err == nil {
			w.settledBatch(items, oks)
			return
		}
		if try == 5 {
			w.settledBatch(items, nil)
			w.log.Error("settling attempts failed; their leases will expire and be settled as lease_expired",
				"error", err, "tasks", len(batch))
			return
		}
		w.log.Warn("settling attempts failed; retrying", "error", err, "tasks", len(batch), "try", try)
		w.c.e.Sleep(context.Background(), backoff)
		backoff *= 2
	}
}

func (w *Worker) heartbeatLoop(ctx context.Context) {
	defer w.bgWG.Done()
	tick := time.NewTicker(w.cfg.HeartbeatInterval)
	defer tick.Stop()
	seen := time.NewTicker(w.registryInterval())
	defer seen.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.heartbeat(ctx)
		case <-seen.C:
			w.seen(ctx)
		}
	}
}

func (w *Worker) heartbeat(ctx context.Context) {
	w.mu.Lock()
	beats := make([]store.Beat, 0, len(w.running))
	atts := make([]*workerAttempt, 0, len(w.running))
	for wa := range w.running {
		p, _ := wa.snapshot()
		beats = append(beats, store.Beat{TaskID: wa.task.ID, ExecutionID: wa.task.ExecutionID, Progress: p})
		atts = append(atts, wa)
	}
	w.mu.Unlock()
	if len(beats) == 0 {
		return
	}
	now := w.c.now()
	res, err := w.c.store.Heartbeat(ctx, beats, now, now.Add(w.cfg.Lease))
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("heartbeat failed", "error", err, "tasks", len(beats))
		}
		return
	}
	for i, r := range res {
		switch {
		case r.Lost:
			w.cancelAttempt(atts[i], errLeaseLost)
		case r.CancelRequested:
			w.cancelAttempt(atts[i], ErrTaskCanceled)
		}
	}
}

// settledBatch records a settled batch's telemetry.
func (w *Worker) settledBatch(items []settleItem, oks []bool) {
	w.c.telemetry.SettledBatch(len(items), func(i int) (*Task, trace.Span, time.Time, *store.Settlement) {
		it := &items[i]
		return it.a.task, it.a.span, it.a.started, &it.s
	}, oks)
}

// minClaimPart is the smallest claim a worker splits a claim into: below
// it a statement's fixed cost outweighs running parts side by side.
const minClaimPart = 250

// maxCompleterBatch bounds one settle statement.
const maxCompleterBatch = 2000

// A completer lets its batch fill while another completer's batch is
// being written: the settlements that arrive meanwhile join it instead of
// a second statement beside the first (one settle statement at a time,
// each as large as what arrived while the last one ran: group commit).
// With nothing being written it writes at once, so an idle worker's
// settle is never delayed. completerFillWait bounds the wait (a batch
// being written that slowly is written beside), far inside any lease.
const completerFillWait = 100 * time.Millisecond

// completers is how many completers the worker runs: as configured, else as
// many as the store applies settle batches well at once (store.Features).
func (w *Worker) completers() int {
	return max(1, cmp.Or(w.cfg.SettleParallelism, w.c.store.Features().SettleParallelism))
}

// startCompleters starts the completers; completersDone is closed once all of
// them have drained settleCh after it was closed.
func (w *Worker) startCompleters() {
	n := w.completers()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.completer()
		}()
	}
	go func() {
		wg.Wait()
		close(w.completersDone)
	}()
}

// completer batches settlements: under load many attempts settle in one
// statement (what has queued up while the last batch was written, up to
// maxCompleterBatch; with several completers, what arrives while another
// completer's batch is written joins too: completerFillWait); when idle
// each settles at once. Several completers take from the same channel,
// one at a time (takeMu: a batch filling is not split between them): the
// settlements of one task never overlap (one attempt settles once), so
// their batches touch disjoint tasks.
func (w *Worker) completer() {
	var scratch []store.Settlement
	batch := make([]settleItem, 0, maxCompleterBatch)
	fill := time.NewTimer(time.Hour)
	fill.Stop()
	for {
		var ok bool
		w.takeMu.Lock()
		batch, ok = w.takeBatch(batch[:0], fill)
		if ok {
			w.flushing.Add(1) // before the next completer takes: it waits for this batch
		}
		w.takeMu.Unlock()
		if !ok {
			return
		}
		w.flush(batch, &scratch)
		w.flushing.Add(-1)
		signal(w.flushed)
	}
}

// takeBatch waits for a settlement and takes what else is waiting; while
// another completer's batch is being written it goes on taking until that
// ends (or completerFillWait, or maxCompleterBatch). ok is false once
// settleCh is closed and drained.
func (w *Worker) takeBatch(batch []settleItem, fill *time.Timer) ([]settleItem, bool) {
	s, ok := <-w.settleCh
	if !ok {
		return batch, false
	}
	batch = append(batch, s)
	for len(batch) < maxCompleterBatch {
		select {
		case s, ok := <-w.settleCh:
			if !ok {
				return batch, true
			}
			batch = append(batch, s)
			continue
		default:
		}
		break
	}
	select {
	case <-w.flushed: // a batch written before this one was taken
	default:
	}
	if len(batch) >= maxCompleterBatch || w.flushing.Load() == 0 {
		return batch, true
	}
	fill.Reset(w.fillWait)
	defer fill.Stop()
	for len(batch) < maxCompleterBatch {
		select {
		case s, ok := <-w.settleCh:
			if !ok {
				return batch, true
			}
			batch = append(batch, s)
		case <-w.flushed:
			return batch, true
		case <-fill.C:
			return batch, true
		}
	}
	return batch, true
}

// settleQueue bounds the finished attempts waiting for a completer (beyond
// those the worker's slots hold while they wait to hand theirs over). Every
// one of them is a task whose task.succeeded event is not written yet: the
// bound is what keeps a follower's lag near one batch's time instead of
// several, while a batch is still always ready when a completer is free
// (slots blocked on the hand-over feed the next batch directly; a batch
// filling takes from the channel as it fills, up to maxCompleterBatch).
const settleQueue = 1000

// settlements lists the items' settlements in a completer's scratch.
func settlements(items []settleItem, scratch *[]store.Settlement) []store.Settlement {
	*scratch = (*scratch)[:0]
	for i := range items {
		*scratch = append(*scratch, items[i].s)
	}
	return *scratch
}
