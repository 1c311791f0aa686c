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
	"github.com/backstophq/backstop/internal/execworker"
)

// remoteClaimWait is each claim's long-poll wait.
const remoteClaimWait = 20 * time.Second

// errRemoteDrain ends programs whose grace ran out on a drain.
var errRemoteDrain = errors.New("worker shutting down: grace period over")

// remoteWork is `backstop work --server URL`: the exec worker over the HTTP
// worker protocol. Each of --concurrency slots long-polls for one task, runs
// the program, heartbeats every lease/3 and reports the outcome.
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
	h, err := execworker.New(execworker.Config{Command: command, PermanentExitCodes: o.permanentCodes, OutputLimit: o.outputLimit})
	if err != nil {
		return usageErr("work: %v", err)
	}
	tel, stopTelemetry, err := a.startWorkTelemetry(ctx, nil, o.metricsAddr)
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
	r := &remoteWorker{cl: cl, h: h, log: log, id: id, o: o}
	r.lastActive.Store(time.Now().UnixNano())
	reg := startRemoteRegistry(cl, id, o.queues, log) // remoteregistry.go

	// claimCtx ends claiming; killCtx kills running programs.
	claimCtx, stopClaims := context.WithCancel(context.WithoutCancel(ctx))
	defer stopClaims()
	killCtx, kill := context.WithCancelCause(context.WithoutCancel(ctx))
	defer kill(nil)
	var wg sync.WaitGroup
	// Each queue has its own slots (its concurrency) and lease.
	for _, q := range o.queues {
		s := o.settings(q)
		for range s.concurrency {
			wg.Go(func() { r.slot(claimCtx, killCtx, q, s.lease) })
		}
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
		case <-idle:
			if r.running.Load() == 0 && time.Since(time.Unix(0, r.lastActive.Load())) >= o.exitAfterIdle {
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
	select {
	case <-done:
	case <-grace.C:
		kill(errRemoteDrain)
		<-done
	case <-sigs:
		log.Warn("second signal: ending the grace period now", "worker_id", id)
		kill(errRemoteDrain)
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
	running    atomic.Int32
	lastActive atomic.Int64
}

// slot claims and runs one task at a time until claimCtx ends.
func (r *remoteWorker) slot(claimCtx, killCtx context.Context, queue string, lease time.Duration) {
	backoff := 100 * time.Millisecond
	for claimCtx.Err() == nil {
		ts, err := r.cl.Claim(claimCtx, api.ClaimRequest{Queues: []string{queue}, Kinds: r.o.kinds, WorkerID: r.id, Max: 1,
			Wait: bt.Duration(remoteClaimWait), Lease: bt.Duration(lease)})
		if err != nil {
			if claimCtx.Err() != nil {
				return
			}
			r.log.Warn("claim failed; retrying", "worker_id", r.id, "error", err.Error(), "backoff", backoff.String())
			select {
			case <-claimCtx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		for _, t := range ts {
			r.run(killCtx, t, lease)
		}
	}
}

// run runs one claimed task: the program, heartbeats, then the report.
func (r *remoteWorker) run(killCtx context.Context, ct api.ClaimedTask, lease time.Duration) {
	r.running.Add(1)
	defer func() { r.running.Add(-1); r.lastActive.Store(time.Now().UnixNano()) }()
	t := ct.Task
	t.ExecutionID = cmp.Or(t.ExecutionID, ct.LeaseToken)
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
	var lost atomic.Bool
	beatDone := make(chan struct{})
	go func() {
		defer close(beatDone)
		tick := time.NewTicker(lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			bctx, bcancel := context.WithTimeout(context.Background(), lease/3)
			res, err := r.cl.Heartbeat(bctx, t.ID, api.HeartbeatRequest{LeaseToken: ct.LeaseToken, Lease: bt.Duration(lease), WorkerID: r.id})
			bcancel()
			var p *api.Problem
			switch {
			case errors.As(err, &p) && (p.Status == 409 || p.Status == 404):
				log.Warn("lease lost; killing the program", "error", err.Error())
				lost.Store(true)
				cancel(errors.New("lease lost"))
				return
			case err != nil:
				log.Warn("heartbeat failed", "error", err.Error())
			case res.CancelRequested:
				log.Info("task canceled by an operator; killing the program")
				cancel(errors.New("task canceled by operator"))
				return
			}
		}
	}()
	rl := startRemoteLog(r.cl, t.ID, ct.LeaseToken, log)
	res := r.h.Run(backstop.ContextWithLogSink(ctx, rl.add), (*backstop.Task)(t))
	cancel(nil)
	<-beatDone
	rl.close() // before the report: the token is stale after it
	if lost.Load() {
		return // the lease is gone: nothing to report
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	var err error
	switch {
	case res.Err != nil && errors.Is(context.Cause(killCtx), errRemoteDrain):
		// Killed because the drain's grace ran out: give the task back
		// uncharged, as an in-process worker does.
		_, err = r.cl.Release(rctx, t.ID, api.ReleaseRequest{LeaseToken: ct.LeaseToken})
		if err == nil {
			log.Info("task released on shutdown (not charged)")
		}
	case res.Err == nil:
		_, err = r.cl.Complete(rctx, t.ID, api.CompleteRequest{LeaseToken: ct.LeaseToken})
		log.Info("task succeeded")
	default:
		outcome := bt.OutcomeTransientError
		switch {
		case timedOut.Load():
			outcome = bt.OutcomeTimeout
		case backstop.IsPermanent(res.Err):
			outcome = bt.OutcomePermanentError
		}
		var sr *api.SettleResponse
		sr, err = r.cl.Fail(rctx, t.ID, api.FailRequest{LeaseToken: ct.LeaseToken, Outcome: outcome, Error: res.Err.Error(), ErrorDetail: res.Output})
		if err == nil {
			log.Info("task attempt failed", "outcome", outcome, "state", sr.State, "error", res.Err.Error())
		}
	}
	if err != nil {
		log.Error("reporting the attempt failed; the server will settle it when the lease expires", "error", err.Error())
	}
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
