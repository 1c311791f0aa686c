package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/execworker"
	"github.com/backstophq/backstop/internal/remote"
)

// remoteClaimWait is each claim's long-poll wait.
const remoteClaimWait = 20 * time.Second

// errRemoteDrain ends programs whose grace ran out on a drain.
var errRemoteDrain = errors.New("worker shutting down: grace period over")

// remoteWork is `backstop work --server URL`: the exec worker over the HTTP
// worker protocol. Each queue's claimer long-polls for as many tasks as it
// has free slots (--concurrency); each task's program runs, heartbeats
// every lease/3 and reports the outcome.
func (a *app) remoteWork(ctx context.Context, o *workOptions, command []string) error {
	if len(o.queues) == 0 {
		return usageErr("work: --queue is required")
	}
	if err := o.checkQueues(); err != nil {
		return err
	}
	if o.exitAfterIdle < 0 || o.grace < 0 {
		return usageErr("work: --exit-after-idle and --grace must not be negative")
	}
	if o.cancelGrace <= 0 {
		return usageErr("work: --cancel-grace must be positive")
	}
	h, err := execworker.New(execworker.Config{Command: command, PermanentExitCodes: o.permanentCodes, OutputLimit: o.outputLimit,
		CancelGrace: o.cancelGrace})
	if err != nil {
		return usageErr("work: %v", err)
	}
	defer h.Close() //nolint:errcheck // best effort: a directory of leftover result files
	tel, stopTelemetry, err := a.startWorkTelemetry(ctx, &config.Config{Log: o.logConfig}, o.metricsAddr)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	log := tel.Logger
	id := o.id
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d-%04x", cmp.Or(host, "worker"), os.Getpid(), rand.IntN(1<<16))
	}
	cl := apiclient.New(o.server, o.token)
	// cutCtx cuts the claims still waiting for their answer (a second
	// signal): until then a drain stops them by name and reads their
	// answers (claimer).
	cutCtx, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	r := &remoteWorker{cl: cl, h: h, log: log, id: id, o: o, done: &remoteCompleter{cl: cl}, empty: make(chan struct{}),
		cut: cutCtx}
	defer r.stops.Wait()
	r.lastActive.Store(time.Now().UnixNano())
	reg := startRemoteRegistry(cl, api.RegisterWorkerRequest{ID: id, Queues: o.queues,
		Labels: o.registryLabels(), Version: o.registryVersion()}, log) // remoteregistry.go

	// claimCtx ends claiming; killCtx kills running programs.
	claimCtx, stopClaims := context.WithCancel(context.WithoutCancel(ctx))
	defer stopClaims()
	killCtx, kill := context.WithCancelCause(context.WithoutCancel(ctx))
	defer kill(nil)
	var wg sync.WaitGroup
	// Each queue has its own slots (its concurrency) and lease.
	for _, q := range o.queues {
		s := o.settings(q)
		wg.Go(func() { r.claimer(claimCtx, killCtx, q, s.concurrency, s.lease) })
	}
	log.Info("remote worker started", "worker_id", id, "server", o.server, "queues", o.queues, "kinds", o.kinds,
		"concurrency", o.concurrency, "lease", o.lease.String(), "command", command)

	var idle <-chan time.Time
	if o.exitAfterIdle > 0 {
		tick := time.NewTicker(min(o.exitAfterIdle/4, 250*time.Millisecond))
		defer tick.Stop()
		idle = tick.C
	}
	reason := ""
	for reason == "" {
		select {
		case <-ctx.Done():
			reason = "signal"
		case <-r.empty:
			reason = "empty"
		case <-idle:
			if r.idle(o.exitAfterIdle) {
				reason = "idle"
			}
		}
	}
	log.Info("worker draining", "worker_id", id, "reason", reason, "running", r.running.Load(), "grace", o.grace.String())
	stopClaims()
	reg.drain()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	grace := time.NewTimer(o.grace)
	defer grace.Stop()
	second := func() {
		log.Warn("second signal: ending the grace period now", "worker_id", id)
		kill(errRemoteDrain)
		// A claim stopped by the drain normally has its answer within
		// milliseconds; one still out after that is cut (its tasks come
		// back at lease expiry unless the server sees the hang-up).
		time.AfterFunc(remoteClaimCutDelay, cut)
	}
	select {
	case <-done:
	case <-grace.C:
		kill(errRemoteDrain)
		select {
		case <-done:
		case <-sigs:
			second()
			<-done
		}
	case <-sigs:
		second()
		<-done
	}
	reg.stop()
	log.Info("worker stopped", "worker_id", id, "reason", reason)
	return nil
}

type remoteWorker struct {
	cl         *apiclient.Client
	h          *execworker.Handler
	log        *slog.Logger
	id         string
	o          *workOptions
	done       *remoteCompleter // successes, reported in batches (remotecomplete.go)
	running    atomic.Int32
	lastActive atomic.Int64 // unix nanos: the start, a claim that returned tasks, a task's end
	lastEmpty  atomic.Int64 // unix nanos: the last claim that came back empty
	// With --exit-when-empty: how many queues' claimers found their
	// queue dry and stopped; empty is closed when all have.
	dry   atomic.Int32
	empty chan struct{}
	// cut ends with a second signal: claims still out are cut then.
	cut context.Context
	// stops: the claim stops in flight (a drain waits for them).
	stops sync.WaitGroup
	// unnamed: the server refused claim_id (older than this worker).
	unnamed atomic.Bool
}

// remoteClaimCutDelay is how long a second signal leaves a claim still
// out to bring its answer before the worker hangs up on it.
const remoteClaimCutDelay = 2 * time.Second

// remoteStopTimeout bounds a claim stop request.
const remoteStopTimeout = 5 * time.Second

// queueDry records that one queue's claimer found it dry
// (--exit-when-empty), closing r.empty once every queue is.
func (r *remoteWorker) queueDry() {
	if int(r.dry.Add(1)) == len(r.o.queues) {
		close(r.empty)
	}
}

// claimer claims for one queue's slots until claimCtx ends: one claim
// request in flight at a time, asking for every slot free when it is sent
// (at most remote.MaxClaim), each task run by a goroutine of its own that
// frees its slot when the task is reported. A request for all the free
// slots instead of one per slot: the server's cost per task was mostly its
// claim request. The request long-polls while nothing is claimable, so an
// idle worker holds one waiting request per queue, not one per slot.
func (r *remoteWorker) claimer(claimCtx, killCtx context.Context, queue string, slots int, lease time.Duration) {
	free := make(chan struct{}, slots) // a token per free slot
	for range slots {
		free <- struct{}{}
	}
	release := func() {
		select {
		case free <- struct{}{}:
		default: // never more tokens than slots
		}
	}
	var running sync.WaitGroup
	defer running.Wait()
	// With --exit-when-empty, claims do not wait (an empty answer means
	// nothing was claimable), and after a short one the next waits for
	// this queue's last task to end: a claim that then finds nothing
	// means the queue is dry, and the claimer stops.
	var active atomic.Int32 // this queue's tasks running
	finished := make(chan struct{}, 1)
	short := false
	backoff := 100 * time.Millisecond
	for {
		for short && active.Load() > 0 {
			select {
			case <-claimCtx.Done():
				return
			case <-finished:
			}
		}
		short = false
		select {
		case <-claimCtx.Done():
			return
		case <-free:
		}
		n := 1
	take:
		for n < min(slots, remote.MaxClaim) {
			select {
			case <-free:
				n++
			default:
				break take
			}
		}
		if claimCtx.Err() != nil {
			return // drained while it took the slots
		}
		ts, err := r.claim(claimCtx, api.ClaimRequest{Queues: []string{queue}, Kinds: r.o.kinds, WorkerID: r.id, Max: n,
			Wait: bt.Duration(r.claimWait()), Lease: bt.Duration(lease)})
		for range n - len(ts) {
			release()
		}
		if claimCtx.Err() != nil {
			// Drained while the claim was out: what it leased was never
			// started; give it back uncharged.
			r.giveBack(ts, lease)
			return
		}
		if err != nil {
			_, after := apiclient.Retryable(err)
			wait := max(backoff, min(after, time.Minute))
			r.log.Warn("claim failed; retrying", "worker_id", r.id, "error", err.Error(), "backoff", wait.String())
			select {
			case <-claimCtx.Done():
				return
			case <-time.After(wait):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if r.o.exitWhenEmpty && len(ts) < n {
			if len(ts) == 0 && active.Load() == 0 {
				r.queueDry()
				return
			}
			short = true
		}
		if len(ts) == 0 {
			r.lastEmpty.Store(time.Now().UnixNano())
			continue
		}
		r.running.Add(int32(len(ts))) // run gives each back
		r.lastActive.Store(time.Now().UnixNano())
		active.Add(int32(len(ts)))
		for _, t := range ts {
			running.Go(func() {
				defer func() {
					release()
					active.Add(-1)
					select {
					case finished <- struct{}{}:
					default:
					}
				}()
				r.run(killCtx, t, lease)
			})
		}
	}
}

// claim sends one claim, named by a fresh claim id. A drain (claimCtx
// ending) does not hang up on it: a claim whose transaction committed
// leased its tasks to this worker, and an answer nobody reads leaves them
// running until their leases expire, charged as lease_expired. Instead the
// drain stops the claim by its id (POST /v1/claims/{claim_id}/stop): the
// server claims no more and answers at once, and the caller gives back
// what the answer carries. Only a second signal (r.cut) cuts it; the HTTP
// client's timeout bounds it otherwise. Behind a balancer the stop may
// reach another server: it is sent again every remoteStopRetry until one
// held the claim or the answer came (the claim's wait bounds that).
//
// A server older than claim_id refuses the key: the worker then claims
// without it, and a drain cuts its claims as it used to (the server gives
// back what it claimed for a worker that hung up, when it sees it).
func (r *remoteWorker) claim(claimCtx context.Context, req api.ClaimRequest) ([]api.ClaimedTask, error) {
	if !r.unnamed.Load() {
		ts, err := r.namedClaim(claimCtx, req)
		if !unknownClaimID(err) {
			return ts, err
		}
		if !r.unnamed.Swap(true) {
			r.log.Warn("the server does not know claim_id (it is older than this worker): a drain cuts its claims",
				"worker_id", r.id)
		}
	}
	return r.cl.Claim(claimCtx, req)
}

func (r *remoteWorker) namedClaim(claimCtx context.Context, req api.ClaimRequest) ([]api.ClaimedTask, error) {
	req.ClaimID = fmt.Sprintf("c%016x%016x", rand.Uint64(), rand.Uint64())
	reqCtx, cancel := context.WithCancel(context.WithoutCancel(claimCtx))
	defer cancel()
	defer context.AfterFunc(r.cut, cancel)()
	r.stops.Add(1)
	stopStop := context.AfterFunc(claimCtx, func() { defer r.stops.Done(); r.stopClaim(reqCtx, req.ClaimID) })
	ts, err := r.cl.Claim(reqCtx, req)
	if stopStop() {
		r.stops.Done() // no drain while it was out
	}
	return ts, err
}

// unknownClaimID: err is an older server's refusal of the claim_id key.
func unknownClaimID(err error) bool {
	var p *api.Problem
	return errors.As(err, &p) && p.Status == 400 && p.Code == "invalid_json" && strings.Contains(p.Detail, `"claim_id"`)
}

// remoteStopRetry is how often a stop that found no claim is sent again
// while the claim's answer has not come (another server behind a balancer
// may hold it).
const remoteStopRetry = time.Second

// stopClaim asks the server to stop the claim named id, until a server
// held it or reqCtx ends (the claim's answer came, or it was cut).
func (r *remoteWorker) stopClaim(reqCtx context.Context, id string) {
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(reqCtx, remoteStopTimeout)
		res, err := r.cl.StopClaim(ctx, id)
		cancel()
		switch {
		case reqCtx.Err() != nil:
			return // the answer came: nothing to stop
		case err != nil:
			r.log.Warn("stopping the claim failed; waiting for its answer", "worker_id", r.id, "claim_id", id, "try", try,
				"error", err.Error())
		case res.Held:
			r.log.Debug("claim stopped", "worker_id", r.id, "claim_id", id, "try", try)
			return
		default:
			r.log.Debug("claim stop: the server did not hold the claim (answered, or another server's)", "worker_id", r.id,
				"claim_id", id, "try", try)
		}
		select {
		case <-reqCtx.Done():
			return
		case <-time.After(remoteStopRetry):
		}
	}
}

// giveBack releases tasks a claim brought after the drain began (never
// started: uncharged, the attempt count unchanged, recorded as released).
func (r *remoteWorker) giveBack(ts []api.ClaimedTask, lease time.Duration) {
	for _, ct := range ts {
		l := apiclient.LeaseOf(ct)
		l.WorkerID = cmp.Or(l.WorkerID, r.id)
		log := r.log.With("worker_id", r.id, "task_id", ct.Task.ID, "attempt", ct.Task.Attempt)
		ctx, cancel := context.WithTimeout(context.Background(), max(lease, remoteReportFloor))
		rep, err := r.cl.ReportRelease(ctx, l, api.ReleaseRequest{},
			&apiclient.Retry{Max: min(5*time.Second, max(lease/3, 100*time.Millisecond))})
		cancel()
		if err != nil {
			log.Error("gave up releasing a task claimed as the worker drained; it comes back at lease expiry", "error", err.Error())
			continue
		}
		log.Info("task released on shutdown (claimed as the worker drained; not charged)", reportArgs(rep)...)
	}
}

// claimWait is each claim's long-poll wait: remoteClaimWait, or
// --exit-after-idle when shorter, so that an empty claim is the proof that
// nothing was claimable for that long; none with --exit-when-empty, so
// that it is the proof that nothing was claimable at all.
func (r *remoteWorker) claimWait() time.Duration {
	if r.o.exitWhenEmpty {
		return 0
	}
	if d := r.o.exitAfterIdle; d > 0 {
		return min(remoteClaimWait, d)
	}
	return remoteClaimWait
}

// idle says whether the worker may exit for --exit-after-idle d: nothing
// runs, nothing was claimed or finished for d, and a claim came back empty
// since (a claim still in flight may yet bring a task: the server may be
// slow to answer).
func (r *remoteWorker) idle(d time.Duration) bool {
	last := r.lastActive.Load()
	return r.running.Load() == 0 && r.lastEmpty.Load() > last && time.Since(time.Unix(0, last)) >= d
}

// remoteReportFloor is how long a report is tried even when the lease's
// expiry (as this worker last extended it) has already passed: only the
// server knows whether maintenance settled the lease yet.
const remoteReportFloor = 5 * time.Second

// run runs one claimed task: the program, heartbeats, then the report. The
// heartbeats go on while the report is retried (a settled outcome is data:
// it is retried until the server takes it or the lease is truly lost).
func (r *remoteWorker) run(killCtx context.Context, ct api.ClaimedTask, lease time.Duration) {
	defer func() { r.running.Add(-1); r.lastActive.Store(time.Now().UnixNano()) }() // slot counted it
	claimed := time.Now()
	t := ct.Task
	l := apiclient.LeaseOf(ct)
	l.WorkerID = cmp.Or(l.WorkerID, r.id)
	log := r.log.With("worker_id", r.id, "task_id", t.ID, "attempt", t.Attempt)

	ctx, cancel := context.WithCancelCause(killCtx)
	// The attempt's span on the server is the parent of the program's
	// (TRACEPARENT) and names this worker's log lines.
	ctx, log = attemptTrace(ctx, ct.AttemptTraceParent, log)
	defer cancel(nil)
	var timedOut atomic.Bool
	if t.Timeout > 0 {
		timer := time.AfterFunc(time.Duration(t.Timeout), func() { timedOut.Store(true); cancel(errors.New("task timeout")) })
		defer timer.Stop()
	}
	// The program's progress (BACKSTOP_PROGRESS_FILE) goes with the
	// heartbeats and the report.
	var progress atomic.Pointer[bt.Progress]
	ctx = backstop.ContextWithProgressSink(ctx, func(p backstop.Progress) { progress.Store(&p) })
	k := r.cl.KeepLease(l, claimed, apiclient.KeepOptions{Lease: lease, WorkerID: r.id, Progress: progress.Load,
		OnCancelRequested: func() {
			log.Info("task canceled; stopping the program (SIGTERM, then SIGKILL after the cancel grace)")
			cancel(backstop.ErrTaskCanceled)
		},
		OnLost: func(err error) {
			// Lost, or (once the program ended) settled by this very
			// report: the report's own answer tells which.
			log.Warn("lease lost; killing the program if it still runs", "error", err.Error())
			cancel(errors.New("lease lost"))
		},
		OnError: func(err error, wait time.Duration, keptUntil time.Time) {
			log.Warn("heartbeat failed; retrying", "error", err.Error(), "wait", wait.String(),
				"lease_kept_until", keptUntil.Format(time.RFC3339Nano))
		},
	})
	defer k.Stop()

	rl := startRemoteLog(r.cl, l, log)
	res := r.h.Run(backstop.ContextWithLogSink(ctx, rl.add), (*backstop.Task)(t))
	cancel(nil)
	if k.Lost() {
		rl.abandon() // the server keeps no more lines of it
		log.Error("lease lost while the program ran; the attempt is not reported", "program_error", errString(res.Err))
		return
	}

	// The report's context ends when the lease's expiry passes with no
	// successful heartbeat (each one pushes it back), but not before
	// remoteReportFloor.
	rctx, rcancel := k.ReportContext(remoteReportFloor)
	defer rcancel()
	retry := &apiclient.Retry{Max: min(5*time.Second, max(lease/3, 100*time.Millisecond)), OnRetry: func(try int, err error, wait time.Duration) {
		log.Warn("reporting the attempt failed; retrying", "error", err.Error(), "try", try, "wait", wait.String(),
			"lease_kept_until", k.Until().Format(time.RFC3339Nano))
	}}
	rl.retry = retry
	rl.close(rctx) // before the report: the token is stale after it

	var (
		what string // the outcome being reported, for the give-up line
		rep  *apiclient.Report
		err  error
	)
	switch {
	case res.Err != nil && errors.Is(context.Cause(killCtx), errRemoteDrain):
		// Killed because the drain's grace ran out: give the task back
		// uncharged, as an in-process worker does.
		what = "released"
		rep, err = r.cl.ReportRelease(rctx, l, api.ReleaseRequest{Progress: res.Progress}, retry)
		if err == nil {
			log.Info("task released on shutdown (not charged)", reportArgs(rep)...)
		}
	case res.Err == nil:
		what = string(bt.OutcomeSucceeded)
		rep, err = r.done.complete(rctx, apiclient.Completion{Lease: l, Result: res.Value, Progress: res.Progress}, retry)
		if err == nil {
			log.Info("task succeeded", reportArgs(rep)...)
		}
	default:
		outcome := bt.OutcomeTransientError
		switch {
		case timedOut.Load():
			outcome = bt.OutcomeTimeout
		case errors.Is(context.Cause(ctx), backstop.ErrTaskCanceled):
			outcome = bt.OutcomeCanceled
		case backstop.IsPermanent(res.Err):
			outcome = bt.OutcomePermanentError
		}
		what = string(outcome)
		rep, err = r.cl.ReportFail(rctx, l, api.FailRequest{Outcome: outcome, Error: res.Err.Error(), ErrorDetail: res.Output, Progress: res.Progress}, retry)
		if err == nil {
			log.Info("task attempt failed", append([]any{"outcome", outcome, "state", rep.State, "error", res.Err.Error()}, reportArgs(rep)...)...)
		}
	}
	if err != nil {
		why := "the server refused the report"
		switch {
		case errors.Is(err, apiclient.ErrLeaseLost):
			why = "the lease is lost: the task was settled elsewhere (expired, canceled or replayed)"
		case rctx.Err() != nil:
			why = context.Cause(rctx).Error()
		}
		log.Error("gave up reporting the attempt", "outcome", what, "reason", why, "error", err.Error(),
			"program_error", errString(res.Err))
	}
}

func reportArgs(rep *apiclient.Report) []any {
	var args []any
	if rep.Tries > 1 {
		args = append(args, "tries", rep.Tries)
	}
	if rep.Confirmed {
		args = append(args, "confirmed", "an earlier try landed; its answer was lost")
	}
	return args
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// attemptTrace puts the server's span of the attempt (the claim's
// attempt_traceparent) into ctx and its ids into log.
func attemptTrace(ctx context.Context, traceparent string, log *slog.Logger) (context.Context, *slog.Logger) {
	if traceparent == "" {
		return ctx, log
	}
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ctx, log
	}
	return ctx, log.With("trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
}
