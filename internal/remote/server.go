package remote

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/redact"
	"github.com/backstophq/backstop/store"
)

// Server is the server side of the remote worker protocol over one
// engine: a worker in another process (any language, over HTTP) claims
// tasks, heartbeats them and reports how each attempt ended; the engine
// decides what happens next with exactly the rules it applies to
// in-process handlers (Engine.Decide). The claim hands the worker a lease
// token for each attempt, a secret naming the attempt's execution; every
// call names it, and the store applies a call only while that lease is
// current, so a worker that lost its lease (expired and settled, canceled,
// replayed), or a caller that guesses, changes nothing and gets
// ErrLeaseNotCurrent. Each call's events name the caller's actor
// (store.WithActor; none: "library").
type Server struct{ e *engine.Engine }

// New is the protocol's server over e.
func New(e *engine.Engine) *Server { return &Server{e: e} }

// TraceParent is the W3C traceparent of the consumer span of the remote
// attempt executionID names, for the worker's own spans to take as parent;
// empty when no trace is recorded (no tracer provider, or the attempt was
// claimed through another process).
func (srv *Server) TraceParent(executionID string) string {
	return srv.e.RemoteTraceParent(executionID)
}

func validateClaim(p *Claim) error {
	if len(p.Queues) == 0 {
		return engine.Invalid("queues", "name at least one queue")
	}
	if len(p.Queues) > MaxQueues {
		return engine.Invalid("queues", "at most %d queues", MaxQueues)
	}
	for _, q := range p.Queues {
		if err := engine.ValidName(q); err != nil {
			return engine.Invalid("queues", "%v", err)
		}
	}
	for _, k := range p.Kinds {
		if err := engine.ValidName(k); err != nil {
			return engine.Invalid("kinds", "%v", err)
		}
	}
	if err := engine.ValidName(p.WorkerID); err != nil {
		return engine.Invalid("worker_id", "%v", err)
	}
	if p.Max < 0 || p.Max > MaxClaim {
		return engine.Invalid("max", "must be between 1 and %d", MaxClaim)
	}
	if p.Lease != 0 && (p.Lease < MinLease || p.Lease > MaxLease) {
		return engine.Invalid("lease", "must be between %s and %s", MinLease, MaxLease)
	}
	return nil
}

// Claim is the protocol's Claim.
func (srv *Server) Claim(ctx context.Context, p Claim) ([]Lease, error) {
	if err := validateClaim(&p); err != nil {
		return nil, err
	}
	key, err := srv.e.LeaseKey(ctx) // before claiming: a claim must not lack its tokens
	if err != nil {
		return nil, err
	}
	want := max(p.Max, 1)
	lease := cmp.Or(p.Lease, DefaultLease)
	var out []Lease
	for _, q := range p.Queues {
		if len(out) >= want {
			break
		}
		ts, bad, err := srv.e.Claim(ctx, engine.ClaimParams{Queue: q, Kinds: p.Kinds, WorkerID: p.WorkerID,
			Max: want - len(out), Lease: lease})
		if err != nil {
			return out, err
		}
		srv.e.RememberClaims(ctx, ts, lease)
		for _, t := range ts {
			if err := bad[t]; err != nil {
				// Settled here, as the worker would: never handed out.
				if _, serr := srv.settle(ctx, srv.e.Decide(engine.Report{Task: t, Err: err}), t); serr != nil {
					srv.e.Config().Logger.Error("settling a step whose input could not be read", "task_id", t.ID, "error", serr)
				}
				continue
			}
			out = append(out, Lease{Task: t, LeaseToken: engine.MintLeaseToken(key, t.ExecutionID)})
		}
	}
	srv.e.SweepRemote(ctx)
	return out, nil
}

// ClaimRetry is how long a claim of queues, begun at at (Now), that found
// nothing waits before it claims again without a wake-up: until the first
// of their rate budgets that was short then has a token again
// (engine.NextTokenWait), at most poll.
func (srv *Server) ClaimRetry(ctx context.Context, queues []string, at time.Time, poll time.Duration) time.Duration {
	wait := poll
	for _, q := range queues {
		if d, ok := srv.e.NextTokenWait(ctx, q, at, wait); ok {
			wait = d
		}
	}
	return wait
}

// Heartbeat is the protocol's Heartbeat.
func (srv *Server) Heartbeat(ctx context.Context, b Beat) (*BeatResult, error) {
	if err := engine.CheckLease(b.TaskID, b.LeaseToken); err != nil {
		return nil, err
	}
	if b.Lease != 0 && (b.Lease < MinLease || b.Lease > MaxLease) {
		return nil, engine.Invalid("lease", "must be between %s and %s", MinLease, MaxLease)
	}
	if err := engine.ValidProgress(b.Progress); err != nil {
		return nil, err
	}
	exec, err := srv.e.LeaseOf(ctx, b.TaskID, b.LeaseToken)
	if err != nil {
		return nil, err
	}
	now := srv.e.Now()
	until := now.Add(cmp.Or(b.Lease, DefaultLease))
	rs, err := srv.e.Store().Heartbeat(remoteActor(ctx), []store.Beat{{TaskID: b.TaskID, ExecutionID: exec, Progress: b.Progress}}, now, until)
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 || rs[0].Lost {
		return nil, srv.e.LeaseError(ctx, b.TaskID)
	}
	srv.e.ExtendRemote(exec, until)
	return &BeatResult{LeaseExpiresAt: until.UTC().Truncate(time.Microsecond), CancelRequested: rs[0].CancelRequested}, nil
}

// remoteActor names the actor of a remote call's events: the caller's
// (the API token's name), else "library".
func remoteActor(ctx context.Context) context.Context {
	return store.WithActor(ctx, store.ActorFrom(ctx, store.DefaultActor))
}

// settleRemote settles one remote attempt and records its telemetry when
// the settlement applied; t is the task when the caller read it, else nil.
func (srv *Server) settle(ctx context.Context, s store.Settlement, t *bt.Task) (*Result, error) {
	ok, err := srv.e.SettleOne(ctx, s, store.ActorFrom(ctx, store.DefaultActor))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, srv.e.LeaseError(ctx, s.TaskID)
	}
	r := &Result{TaskID: s.TaskID, Outcome: s.Outcome, State: s.State, DeadReason: s.DeadReason}
	r.Span, r.Task = srv.e.RemoteSettled(ctx, t, &s)
	if s.State == bt.StateScheduled || s.State == bt.StatePending {
		at := s.RunAt
		r.RunAt = &at
	}
	return r, nil
}

// Complete is the protocol's Complete (the result checked as
// CheckResult does).
func (srv *Server) Complete(ctx context.Context, taskID, leaseToken string, p *bt.Progress, result json.RawMessage) (*Result, error) {
	if err := engine.CheckLease(taskID, leaseToken); err != nil {
		return nil, err
	}
	if err := engine.ValidProgress(p); err != nil {
		return nil, err
	}
	result, err := engine.CheckResult(result)
	if err != nil {
		return nil, err
	}
	exec, err := srv.e.LeaseOf(ctx, taskID, leaseToken)
	if err != nil {
		return nil, err
	}
	t := &bt.Task{ID: taskID, ExecutionID: exec}
	s := srv.e.Decide(engine.Report{Task: t, Progress: p})
	s.Result = result
	return srv.settle(ctx, s, nil)
}

// Limits on what a failure report may carry.
const (
	maxRemoteError  = 4 << 10
	maxRemoteDetail = 64 << 10
	maxRetryAfter   = 30 * 24 * time.Hour
)

// Fail is the protocol's Fail.
func (srv *Server) Fail(ctx context.Context, f Failure) (*Result, error) {
	if err := engine.CheckLease(f.TaskID, f.LeaseToken); err != nil {
		return nil, err
	}
	if err := engine.ValidProgress(f.Progress); err != nil {
		return nil, err
	}
	if len(f.Error) > maxRemoteError {
		return nil, engine.Invalid("error", "at most %d bytes", maxRemoteError)
	}
	if len(f.ErrorDetail) > maxRemoteDetail {
		return nil, engine.Invalid("error_detail", "at most %d bytes", maxRemoteDetail)
	}
	msg := f.Error
	if msg == "" {
		msg = "remote worker reported " + string(f.Outcome)
	}
	var res, cause error
	switch f.Outcome {
	case bt.OutcomeTransientError:
		res = errors.New(msg)
		if f.RetryAfter != nil {
			if *f.RetryAfter < 0 || *f.RetryAfter > maxRetryAfter {
				return nil, engine.Invalid("retry_after", "must be between 0s and %s", maxRetryAfter)
			}
			res = engine.RetryAfter(*f.RetryAfter)
		}
	case bt.OutcomePermanentError:
		res = engine.Permanent(errors.New(msg))
	case bt.OutcomeTimeout:
		res, cause = errors.New(msg), engine.ErrTimeout
	case bt.OutcomeCanceled:
		res, cause = errors.New(msg), engine.ErrTaskCanceled
	default:
		return nil, engine.Invalid("outcome", "must be transient_error, permanent_error, timeout or canceled, not %q", f.Outcome)
	}
	if f.RetryAfter != nil && f.Outcome != bt.OutcomeTransientError {
		return nil, engine.Invalid("retry_after", "only goes with outcome transient_error")
	}
	exec, err := srv.e.LeaseOf(ctx, f.TaskID, f.LeaseToken)
	if err != nil {
		return nil, err
	}
	// The decision depends on the task (attempts, deadline, retry policy);
	// the settlement still applies only while the lease is current, so a
	// change between this read and the write is safe.
	t, err := srv.e.Store().Get(ctx, f.TaskID)
	if err != nil {
		return nil, err
	}
	if t.State != bt.StateRunning || t.ExecutionID != exec {
		return nil, fmt.Errorf("%w: the lease token is not the current lease of task %q (it is %s)", engine.ErrLeaseNotCurrent, f.TaskID, t.State)
	}
	if t.CancelRequestedAt != nil {
		// An operator canceled the task (its heartbeat answered
		// cancel_requested): whatever failure the worker reports, the
		// attempt ends canceled. A success is still a success.
		cause = engine.ErrTaskCanceled
	}
	s := srv.e.Decide(engine.Report{Task: t, Err: res, Cause: cause, Progress: f.Progress,
		Detail: redact.New(srv.e.Config().RedactKeys).Text(f.ErrorDetail)})
	if f.Error != "" && f.Outcome == bt.OutcomeTimeout {
		s.Error = s.Error + ": " + f.Error
	}
	return srv.settle(ctx, s, t)
}

// Release is the protocol's Release: the task goes back to pending
// at once, uncharged, as an in-process worker releases its running tasks
// when its grace period runs out on a drain (`backstop work --server` on
// SIGTERM).
func (srv *Server) Release(ctx context.Context, taskID, leaseToken string, p *bt.Progress) (*Result, error) {
	if err := engine.CheckLease(taskID, leaseToken); err != nil {
		return nil, err
	}
	if err := engine.ValidProgress(p); err != nil {
		return nil, err
	}
	exec, err := srv.e.LeaseOf(ctx, taskID, leaseToken)
	if err != nil {
		return nil, err
	}
	now := srv.e.Now()
	return srv.settle(ctx, store.Settlement{TaskID: taskID, ExecutionID: exec, Outcome: bt.OutcomeReleased,
		Error: "released on shutdown (not charged)", FinishedAt: now, State: bt.StatePending, RunAt: now,
		Uncharged: true, Progress: p}, nil)
}

// CompleteMany is the protocol's CompleteMany.
func (srv *Server) CompleteMany(ctx context.Context, cs []Completion) ([]Outcome, error) {
	out := make([]Outcome, len(cs))
	var ss []store.Settlement
	var idx []int
	for i, x := range cs {
		if err := engine.CheckLease(x.TaskID, x.LeaseToken); err != nil {
			out[i].Err = err
			continue
		}
		if err := engine.ValidProgress(x.Progress); err != nil {
			out[i].Err = err
			continue
		}
		result, err := engine.CheckResult(x.Result)
		if err != nil {
			out[i].Err = err
			continue
		}
		exec, err := srv.e.LeaseOf(ctx, x.TaskID, x.LeaseToken)
		if errors.Is(err, engine.ErrLeaseNotCurrent) || errors.Is(err, store.ErrNotFound) {
			out[i].Err = err
			continue
		}
		if err != nil {
			return nil, err // the store failed: the caller retries the batch
		}
		t := &bt.Task{ID: x.TaskID, ExecutionID: exec}
		s := srv.e.Decide(engine.Report{Task: t, Progress: x.Progress})
		s.Result = result
		ss = append(ss, s)
		idx = append(idx, i)
	}
	oks, errs := srv.e.SettleMany(ctx, ss, store.ActorFrom(ctx, store.DefaultActor))
	for j, i := range idx {
		s := ss[j]
		switch {
		case errs[j] != nil:
			return nil, errs[j] // the store failed: the caller retries the batch
		case !oks[j]:
			out[i].Err = srv.e.LeaseError(ctx, s.TaskID)
		default:
			out[i].Result = &Result{TaskID: s.TaskID, Outcome: s.Outcome, State: s.State, DeadReason: s.DeadReason}
			out[i].Result.Span, out[i].Result.Task = srv.e.RemoteSettled(ctx, nil, &ss[j])
		}
	}
	return out, nil
}

// AppendLogs is the protocol's AppendLogs.
func (srv *Server) AppendLogs(ctx context.Context, taskID, leaseToken string, lines []LogLine) (LogResult, error) {
	var res LogResult
	if leaseToken == "" {
		return res, engine.Invalid("lease_token", "is required")
	}
	if len(lines) > engine.MaxLogLines {
		return res, engine.Invalid("lines", "at most %d per request", engine.MaxLogLines)
	}
	now := srv.e.Now()
	mask := redact.New(srv.e.Config().RedactKeys)
	in := make([]store.LogLine, len(lines))
	for i, l := range lines {
		switch l.Stream {
		case "":
			l.Stream = engine.LogStreamOutput
		case engine.LogStreamOutput, engine.LogStreamStdout, engine.LogStreamStderr, engine.LogStreamLog:
		default:
			return res, engine.Invalid("stream", "unknown stream %q (use output, stdout, stderr or log)", l.Stream)
		}
		in[i] = store.LogLine{TaskID: taskID, At: now, Stream: l.Stream, Line: mask.Line(l.Line)}
	}
	exec, ok, err := srv.e.LeaseExecution(ctx, leaseToken)
	if err != nil {
		return res, err
	}
	if !ok { // answered as a lease that is not current
		return res, fmt.Errorf("%w: the lease token is not the current lease of task %q", engine.ErrLeaseNotCurrent, taskID)
	}
	for i := range in {
		in[i].ExecutionID = exec
	}
	u, err := srv.e.Store().ExecutionLogUsage(ctx, exec)
	if err != nil {
		return res, err
	}
	b := engine.BoundAfter(u)
	kept := b.Take(in, now)
	ok, err = srv.e.Store().AppendLeasedLogs(ctx, taskID, exec, kept)
	if err != nil {
		return res, err
	}
	if !ok {
		return res, fmt.Errorf("%w: the lease token is not the current lease of task %q", engine.ErrLeaseNotCurrent, taskID)
	}
	for _, l := range kept {
		if l.Stream != engine.LogStreamTruncated {
			res.Accepted++
		}
	}
	res.Truncated = b.Truncated()
	return res, nil
}

// SeeWorker is the protocol's SeeWorker.
func (srv *Server) SeeWorker(ctx context.Context, id, host string, queues []string) error {
	if err := engine.ValidName(id); err != nil {
		return engine.Invalid("worker_id", "%v", err)
	}
	return srv.e.Store().SeeWorker(ctx, store.WorkerInfo{ID: id, Host: host, Queues: queues, Remote: true}, srv.e.Now())
}

// maxWorkerField bounds a remote worker's host and version; maxLabels its
// labels.
const (
	maxWorkerField = 255
	maxLabels      = 64
)

// RegisterWorker is the protocol's RegisterWorker.
func (srv *Server) RegisterWorker(ctx context.Context, w store.WorkerInfo) (*store.WorkerInfo, error) {
	if err := engine.ValidName(w.ID); err != nil {
		return nil, engine.Invalid("id", "%v", err)
	}
	if len(w.Host) > maxWorkerField || len(w.Version) > maxWorkerField {
		return nil, engine.Invalid("host", "host and version are at most %d bytes", maxWorkerField)
	}
	if w.PID < 0 {
		return nil, engine.Invalid("pid", "must not be negative")
	}
	if len(w.Queues) == 0 {
		return nil, engine.Invalid("queues", "name at least one queue")
	}
	for _, q := range w.Queues {
		if err := engine.ValidName(q); err != nil {
			return nil, engine.Invalid("queues", "%v", err)
		}
	}
	if len(w.Labels) > maxLabels {
		return nil, engine.Invalid("labels", "at most %d", maxLabels)
	}
	for k, v := range w.Labels {
		if len(k) == 0 || len(k) > maxWorkerField || len(v) > maxWorkerField {
			return nil, engine.Invalid("labels", "a label's key is 1-%d bytes and its value at most %d", maxWorkerField, maxWorkerField)
		}
	}
	queues := slices.Clone(w.Queues)
	slices.Sort(queues)
	info := store.WorkerInfo{ID: w.ID, Host: w.Host, PID: w.PID, Queues: slices.Compact(queues), Version: w.Version,
		Labels: w.Labels, Remote: true, StartedAt: srv.e.Now()}
	if err := srv.e.Store().RegisterWorker(ctx, info); err != nil {
		return nil, err
	}
	return srv.e.Store().GetWorker(ctx, w.ID, srv.e.Now(), srv.e.Config().WorkerStaleAfter)
}

// WorkerHeartbeat is the protocol's WorkerHeartbeat.
func (srv *Server) WorkerHeartbeat(ctx context.Context, id string, draining bool) (*store.WorkerInfo, error) {
	if err := engine.ValidName(id); err != nil {
		return nil, engine.Invalid("id", "%v", err)
	}
	now := srv.e.Now()
	if draining {
		if err := srv.e.Store().SetWorkerState(ctx, id, store.WorkerStopping, now); err != nil {
			return nil, err
		}
	} else {
		if _, err := srv.e.Store().GetWorker(ctx, id, now, srv.e.Config().WorkerStaleAfter); err != nil {
			return nil, err
		}
		if err := srv.e.Store().SeeWorker(ctx, store.WorkerInfo{ID: id, Remote: true}, now); err != nil {
			return nil, err
		}
	}
	return srv.e.Store().GetWorker(ctx, id, now, srv.e.Config().WorkerStaleAfter)
}

// StopWorker is the protocol's StopWorker.
func (srv *Server) StopWorker(ctx context.Context, id string) (*store.WorkerInfo, error) {
	if err := engine.ValidName(id); err != nil {
		return nil, engine.Invalid("id", "%v", err)
	}
	if err := srv.e.Store().SetWorkerState(ctx, id, store.WorkerStopped, srv.e.Now()); err != nil {
		return nil, err
	}
	return srv.e.Store().GetWorker(ctx, id, srv.e.Now(), srv.e.Config().WorkerStaleAfter)
}

// Now is the engine's clock (a claim's time for ClaimRetry).
func (srv *Server) Now() time.Time { return srv.e.Now() }
