package backstop

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/store"
)

// The remote worker protocol: a worker in another process (any language,
// over HTTP) claims tasks, heartbeats them and reports how each attempt
// ended; the engine decides what happens next with exactly the rules it
// applies to in-process handlers (decide, retryOrDie). The claim hands the
// worker a lease token for each attempt, a secret naming the attempt's
// execution (leasetoken.go); every call names it, and the store applies a
// call only while that lease is current, so a worker that lost its lease
// (expired and settled, canceled, replayed), or a caller that guesses,
// changes nothing and gets ErrConflict. Each call's events name the
// caller's actor (WithActor; none: "library").

func validateClaim(p *remote.Claim) error {
	if len(p.Queues) == 0 {
		return invalid("queues", "name at least one queue")
	}
	if len(p.Queues) > remote.MaxQueues {
		return invalid("queues", "at most %d queues", remote.MaxQueues)
	}
	for _, q := range p.Queues {
		if err := validName(q); err != nil {
			return invalid("queues", "%v", err)
		}
	}
	for _, k := range p.Kinds {
		if err := validName(k); err != nil {
			return invalid("kinds", "%v", err)
		}
	}
	if err := validName(p.WorkerID); err != nil {
		return invalid("worker_id", "%v", err)
	}
	if p.Max < 0 || p.Max > remote.MaxClaim {
		return invalid("max", "must be between 1 and %d", remote.MaxClaim)
	}
	if p.Lease != 0 && (p.Lease < remote.MinLease || p.Lease > remote.MaxLease) {
		return invalid("lease", "must be between %s and %s", remote.MinLease, remote.MaxLease)
	}
	return nil
}

// claimRemote is remote.Protocol.Claim.
func (c *Client) claimRemote(ctx context.Context, p remote.Claim) ([]remote.Lease, error) {
	if err := validateClaim(&p); err != nil {
		return nil, err
	}
	key, err := c.leaseKey(ctx) // before claiming: a claim must not lack its tokens
	if err != nil {
		return nil, err
	}
	want := max(p.Max, 1)
	lease := cmp.Or(p.Lease, remote.DefaultLease)
	var out []remote.Lease
	for _, q := range p.Queues {
		if len(out) >= want {
			break
		}
		if err := c.OrderQueue(ctx, q); err != nil { // ordering.go
			c.cfg.Logger.Error("ordering failed", "queue", q, "error", err)
		}
		ts, err := c.store.Claim(ctx, store.ClaimParams{Queue: q, Kinds: p.Kinds, WorkerID: p.WorkerID,
			Max: want - len(out), Now: c.now(), Lease: lease})
		c.telemetry.claimedRemote(ctx, q, ts, err, c.now())
		if err != nil {
			return out, err
		}
		c.attachOrdering(ctx, q, ts)
		c.rememberClaims(ctx, ts, lease) // remote_attempts.go
		bad := c.stepInputs(ctx, ts)     // steppayload.go
		for _, t := range ts {
			if err := bad[t]; err != nil {
				// Settled here, as the worker would: never handed out.
				if _, serr := c.settleRemote(ctx, c.remoteDecide(t, err, nil, nil, ""), t); serr != nil {
					c.cfg.Logger.Error("settling a step whose input could not be read", "task_id", t.ID, "error", serr)
				}
				continue
			}
			out = append(out, remote.Lease{Task: t, LeaseToken: mintLeaseToken(key, t.ExecutionID)})
		}
	}
	c.sweepRemote(ctx)
	return out, nil
}

func checkLease(taskID, token string) error {
	if taskID == "" {
		return invalid("id", "task id is required")
	}
	if token == "" {
		return invalid("lease_token", "is required")
	}
	return nil
}

// heartbeatRemote is remote.Protocol.Heartbeat.
func (c *Client) heartbeatRemote(ctx context.Context, b remote.Beat) (*remote.BeatResult, error) {
	if err := checkLease(b.TaskID, b.LeaseToken); err != nil {
		return nil, err
	}
	if b.Lease != 0 && (b.Lease < remote.MinLease || b.Lease > remote.MaxLease) {
		return nil, invalid("lease", "must be between %s and %s", remote.MinLease, remote.MaxLease)
	}
	if err := validProgress(b.Progress); err != nil {
		return nil, err
	}
	exec, err := c.leaseOf(ctx, b.TaskID, b.LeaseToken)
	if err != nil {
		return nil, err
	}
	now := c.now()
	until := now.Add(cmpOr(b.Lease, remote.DefaultLease))
	rs, err := c.store.Heartbeat(remoteActor(ctx), []store.Beat{{TaskID: b.TaskID, ExecutionID: exec, Progress: b.Progress}}, now, until)
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 || rs[0].Lost {
		return nil, c.leaseError(ctx, b.TaskID)
	}
	c.remoteAttempts.extend(exec, until)
	return &remote.BeatResult{LeaseExpiresAt: until.UTC().Truncate(time.Microsecond), CancelRequested: rs[0].CancelRequested}, nil
}

// remoteActor names the actor of a remote call's events: the caller's
// (the API token's name), else "library".
func remoteActor(ctx context.Context) context.Context {
	return store.WithActor(ctx, ActorFrom(ctx))
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// leaseError explains a settlement or heartbeat that did not apply.
func (c *Client) leaseError(ctx context.Context, taskID string) error {
	t, err := c.store.Get(ctx, taskID)
	if err != nil {
		return err // ErrNotFound, or the store's failure
	}
	return fmt.Errorf("%w: the lease token is not the current lease of task %q (it is %s)", remote.ErrLeaseNotCurrent, taskID, t.State)
}

// settleRemote settles one remote attempt and records its telemetry when
// the settlement applied; t is the task when the caller read it, else nil.
func (c *Client) settleRemote(ctx context.Context, s store.Settlement, t *Task) (*remote.Result, error) {
	ok, err := c.remote.settle(ctx, c.settle, s, ActorFrom(ctx))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, c.leaseError(ctx, s.TaskID)
	}
	r := &remote.Result{TaskID: s.TaskID, Outcome: s.Outcome, State: s.State, DeadReason: s.DeadReason}
	r.Span = c.remoteSettled(ctx, t, &s)
	if s.State == bt.StateScheduled || s.State == bt.StatePending {
		at := s.RunAt
		r.RunAt = &at
	}
	return r, nil
}

// remoteDecide applies the worker's rules (Worker.decide) to an attempt
// that ran elsewhere: the same result, the same cause, the same decision.
func (c *Client) remoteDecide(t *Task, res, cause error, p *Progress, detail string) store.Settlement {
	w := &Worker{c: c}
	a := &attempt{task: t, progress: p, detail: detail}
	return w.decide(t, res, cause, a)
}

// completeRemote is remote.Protocol.Complete (the result checked as
// CheckResult does).
func (c *Client) completeRemote(ctx context.Context, taskID, leaseToken string, p *Progress, result json.RawMessage) (*remote.Result, error) {
	if err := checkLease(taskID, leaseToken); err != nil {
		return nil, err
	}
	if err := validProgress(p); err != nil {
		return nil, err
	}
	result, err := CheckResult(result)
	if err != nil {
		return nil, err
	}
	exec, err := c.leaseOf(ctx, taskID, leaseToken)
	if err != nil {
		return nil, err
	}
	t := &Task{ID: taskID, ExecutionID: exec}
	s := c.remoteDecide(t, nil, nil, p, "")
	s.Result = result
	return c.settleRemote(ctx, s, nil)
}

// Limits on what a failure report may carry.
const (
	maxRemoteError  = 4 << 10
	maxRemoteDetail = 64 << 10
	maxRetryAfter   = 30 * 24 * time.Hour
)

// failRemote is remote.Protocol.Fail.
func (c *Client) failRemote(ctx context.Context, f remote.Failure) (*remote.Result, error) {
	if err := checkLease(f.TaskID, f.LeaseToken); err != nil {
		return nil, err
	}
	if err := validProgress(f.Progress); err != nil {
		return nil, err
	}
	if len(f.Error) > maxRemoteError {
		return nil, invalid("error", "at most %d bytes", maxRemoteError)
	}
	if len(f.ErrorDetail) > maxRemoteDetail {
		return nil, invalid("error_detail", "at most %d bytes", maxRemoteDetail)
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
				return nil, invalid("retry_after", "must be between 0s and %s", maxRetryAfter)
			}
			res = RetryAfter(*f.RetryAfter)
		}
	case bt.OutcomePermanentError:
		res = Permanent(errors.New(msg))
	case bt.OutcomeTimeout:
		res, cause = errors.New(msg), errTimeout
	case bt.OutcomeCanceled:
		res, cause = errors.New(msg), ErrTaskCanceled
	default:
		return nil, invalid("outcome", "must be transient_error, permanent_error, timeout or canceled, not %q", f.Outcome)
	}
	if f.RetryAfter != nil && f.Outcome != bt.OutcomeTransientError {
		return nil, invalid("retry_after", "only goes with outcome transient_error")
	}
	exec, err := c.leaseOf(ctx, f.TaskID, f.LeaseToken)
	if err != nil {
		return nil, err
	}
	// The decision depends on the task (attempts, deadline, retry policy);
	// the settlement still applies only while the lease is current, so a
	// change between this read and the write is safe.
	t, err := c.store.Get(ctx, f.TaskID)
	if err != nil {
		return nil, err
	}
	if t.State != bt.StateRunning || t.ExecutionID != exec {
		return nil, fmt.Errorf("%w: the lease token is not the current lease of task %q (it is %s)", remote.ErrLeaseNotCurrent, f.TaskID, t.State)
	}
	if t.CancelRequestedAt != nil {
		// An operator canceled the task (its heartbeat answered
		// cancel_requested): whatever failure the worker reports, the
		// attempt ends canceled. A success is still a success.
		cause = ErrTaskCanceled
	}
	s := c.remoteDecide(t, res, cause, f.Progress, c.Masker().Text(f.ErrorDetail))
	if f.Error != "" && f.Outcome == bt.OutcomeTimeout {
		s.Error = s.Error + ": " + f.Error
	}
	return c.settleRemote(ctx, s, t)
}

// settleBatcher coalesces settlements that arrive concurrently (remote
// workers completing in parallel HTTP requests) into one Client.settle: one
// transaction for many attempts, as the in-process worker's completer does.
// No goroutine of its own: the first caller flushes while later ones queue,
// then flushes what queued meanwhile. Its zero value is ready.
type settleBatcher struct {
	mu       sync.Mutex
	pending  []*settleReq
	flushing bool
}

type settleReq struct {
	s     store.Settlement
	actor string // who reported it: the events name them
	done  chan struct{}
	ok    bool
	err   error
}

// maxSettleBatch bounds one flush.
const maxSettleBatch = 500

func (b *settleBatcher) settle(ctx context.Context, st settleFunc, s store.Settlement, actor string) (bool, error) {
	r := &settleReq{s: s, actor: actor, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, r)
	if b.flushing {
		b.mu.Unlock()
		<-r.done
		return r.ok, r.err
	}
	b.flushing = true
	for len(b.pending) > 0 {
		batch := b.take()
		b.mu.Unlock()
		b.flush(ctx, st, batch)
		b.mu.Lock()
	}
	b.flushing = false
	b.mu.Unlock()
	<-r.done
	return r.ok, r.err
}

// take removes the next batch from pending (locked): at most one
// settlement per task, so a batch never names a lease twice, and one
// actor's, whom the batch's events name.
func (b *settleBatcher) take() []*settleReq {
	var batch, rest []*settleReq
	seen := make(map[string]bool, len(b.pending))
	actor := b.pending[0].actor
	for _, r := range b.pending {
		if seen[r.s.TaskID] || len(batch) >= maxSettleBatch || r.actor != actor {
			rest = append(rest, r)
			continue
		}
		seen[r.s.TaskID] = true
		batch = append(batch, r)
	}
	b.pending = rest
	return batch
}

func (b *settleBatcher) flush(ctx context.Context, st settleFunc, batch []*settleReq) {
	// The batch carries other callers' settlements: the first caller going
	// away must not cut them off.
	fctx, cancel := context.WithTimeout(store.WithActor(context.WithoutCancel(ctx), batch[0].actor), 30*time.Second)
	defer cancel()
	ss := make([]store.Settlement, len(batch))
	for i, r := range batch {
		ss[i] = r.s
	}
	oks, err := st(fctx, ss)
	if err == nil && len(oks) != len(ss) {
		err = fmt.Errorf("backstop: store settled %d of %d", len(oks), len(ss))
	}
	for i, r := range batch {
		r.err = err
		r.ok = err == nil && oks[i]
		close(r.done)
	}
}

// releaseRemote is remote.Protocol.Release: the task goes back to pending
// at once, uncharged, as an in-process worker releases its running tasks
// when its grace period runs out on a drain (`backstop work --server` on
// SIGTERM).
func (c *Client) releaseRemote(ctx context.Context, taskID, leaseToken string, p *Progress) (*remote.Result, error) {
	if err := checkLease(taskID, leaseToken); err != nil {
		return nil, err
	}
	if err := validProgress(p); err != nil {
		return nil, err
	}
	exec, err := c.leaseOf(ctx, taskID, leaseToken)
	if err != nil {
		return nil, err
	}
	now := c.now()
	return c.settleRemote(ctx, store.Settlement{TaskID: taskID, ExecutionID: exec, Outcome: bt.OutcomeReleased,
		Error: "released on shutdown (not charged)", FinishedAt: now, State: bt.StatePending, RunAt: now,
		Uncharged: true, Progress: p}, nil)
}

// completeManyRemote is remote.Protocol.CompleteMany.
func (c *Client) completeManyRemote(ctx context.Context, cs []remote.Completion) ([]remote.Outcome, error) {
	out := make([]remote.Outcome, len(cs))
	var ss []store.Settlement
	var idx []int
	for i, x := range cs {
		if err := checkLease(x.TaskID, x.LeaseToken); err != nil {
			out[i].Err = err
			continue
		}
		if err := validProgress(x.Progress); err != nil {
			out[i].Err = err
			continue
		}
		result, err := CheckResult(x.Result)
		if err != nil {
			out[i].Err = err
			continue
		}
		exec, err := c.leaseOf(ctx, x.TaskID, x.LeaseToken)
		if errors.Is(err, remote.ErrLeaseNotCurrent) || errors.Is(err, ErrNotFound) {
			out[i].Err = err
			continue
		}
		if err != nil {
			return nil, err // the store failed: the caller retries the batch
		}
		t := &Task{ID: x.TaskID, ExecutionID: exec}
		s := c.remoteDecide(t, nil, nil, x.Progress, "")
		s.Result = result
		ss = append(ss, s)
		idx = append(idx, i)
	}
	oks, errs := c.remote.settleMany(ctx, c.settle, ss, ActorFrom(ctx))
	for j, i := range idx {
		s := ss[j]
		switch {
		case errs[j] != nil:
			return nil, errs[j] // the store failed: the caller retries the batch
		case !oks[j]:
			out[i].Err = c.leaseError(ctx, s.TaskID)
		default:
			out[i].Result = &remote.Result{TaskID: s.TaskID, Outcome: s.Outcome, State: s.State, DeadReason: s.DeadReason}
			out[i].Result.Span = c.remoteSettled(ctx, nil, &ss[j])
		}
	}
	return out, nil
}

// settleMany queues many settlements at once and waits for all; the
// batcher writes them (and whatever else is pending) together.
func (b *settleBatcher) settleMany(ctx context.Context, st settleFunc, ss []store.Settlement, actor string) ([]bool, []error) {
	reqs := make([]*settleReq, len(ss))
	b.mu.Lock()
	for i, s := range ss {
		reqs[i] = &settleReq{s: s, actor: actor, done: make(chan struct{})}
		b.pending = append(b.pending, reqs[i])
	}
	if !b.flushing {
		b.flushing = true
		for len(b.pending) > 0 {
			batch := b.take()
			b.mu.Unlock()
			b.flush(ctx, st, batch)
			b.mu.Lock()
		}
		b.flushing = false
	}
	b.mu.Unlock()
	oks, errs := make([]bool, len(ss)), make([]error, len(ss))
	for i, r := range reqs {
		<-r.done
		oks[i], errs[i] = r.ok, r.err
	}
	return oks, errs
}

// The server side of the remote worker protocol is not part of the
// library's surface: the HTTP API (and the tests) reach it through
// internal/remote, whose accessor this installs. remote.Of(c) is c's
// protocol; the calls are the Client's unexported methods (this file,
// logs.go, workers.go, remote_attempts.go).
func init() {
	remote.Install(func(c any) remote.Protocol { return remoteProtocol{c.(*Client)} })
}

// remoteProtocol is a Client as remote.Protocol.
type remoteProtocol struct{ c *Client }

func (p remoteProtocol) Claim(ctx context.Context, q remote.Claim) ([]remote.Lease, error) {
	return p.c.claimRemote(ctx, q)
}

func (p remoteProtocol) Heartbeat(ctx context.Context, b remote.Beat) (*remote.BeatResult, error) {
	return p.c.heartbeatRemote(ctx, b)
}

func (p remoteProtocol) Complete(ctx context.Context, taskID, leaseToken string, pr *Progress, result json.RawMessage) (*remote.Result, error) {
	return p.c.completeRemote(ctx, taskID, leaseToken, pr, result)
}

func (p remoteProtocol) CompleteMany(ctx context.Context, cs []remote.Completion) ([]remote.Outcome, error) {
	return p.c.completeManyRemote(ctx, cs)
}

func (p remoteProtocol) Fail(ctx context.Context, f remote.Failure) (*remote.Result, error) {
	return p.c.failRemote(ctx, f)
}

func (p remoteProtocol) Release(ctx context.Context, taskID, leaseToken string, pr *Progress) (*remote.Result, error) {
	return p.c.releaseRemote(ctx, taskID, leaseToken, pr)
}

func (p remoteProtocol) AppendLogs(ctx context.Context, taskID, leaseToken string, lines []remote.LogLine) (remote.LogResult, error) {
	return p.c.appendRemoteLogs(ctx, taskID, leaseToken, lines)
}

func (p remoteProtocol) TraceParent(executionID string) string {
	return p.c.remoteTraceParent(executionID)
}

func (p remoteProtocol) RegisterWorker(ctx context.Context, w WorkerInfo) (*WorkerInfo, error) {
	return p.c.registerRemoteWorker(ctx, w)
}

func (p remoteProtocol) WorkerHeartbeat(ctx context.Context, id string, draining bool) (*WorkerInfo, error) {
	return p.c.remoteWorkerHeartbeat(ctx, id, draining)
}

func (p remoteProtocol) StopWorker(ctx context.Context, id string) (*WorkerInfo, error) {
	return p.c.stopRemoteWorker(ctx, id)
}

func (p remoteProtocol) SeeWorker(ctx context.Context, id, host string, queues []string) error {
	return p.c.seeRemoteWorker(ctx, id, host, queues)
}
