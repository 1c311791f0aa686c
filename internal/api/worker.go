package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/remote"
)

// The remote worker protocol: claim (long-poll), then heartbeat / progress
// and finally complete or fail, each naming the attempt's lease token: a
// secret that only the claim's answer carries (leasetoken.go at the root).
// The library (remote.go at the root) makes every decision; the events of
// each call name the calling token (actorContext).

// ClaimRequest is POST /v1/claim.
type ClaimRequest struct {
	Queues   []string `json:"queues"`
	Kinds    []string `json:"kinds"`
	WorkerID string   `json:"worker_id"`
	// Max tasks to lease. Default 1.
	Max int `json:"max"`
	// Wait: when nothing is claimable, wait up to this long for work
	// (bounded by the server's MaxWait, default 30s). Default 0.
	Wait bt.Duration `json:"wait"`
	// Lease: how long the claim lasts without a heartbeat. Default 30s.
	Lease bt.Duration `json:"lease"`
	// ClaimID (optional) names this claim, for POST
	// /v1/claims/{claim_id}/stop (claimstop.go): a draining worker ends
	// the claim's wait by name and reads its answer instead of hanging up
	// on it. Made by the worker, unique among its claims.
	ClaimID string `json:"claim_id,omitempty"`
}

// ClaimedTask is a leased task: the task's JSON (execution_id included)
// plus its lease token, a secret for this worker alone: no other answer
// carries it, and every later call about the attempt must name it.
type ClaimedTask struct {
	TaskView
	LeaseToken string `json:"lease_token"`
	// AttemptTraceParent is the W3C traceparent of the attempt's consumer
	// span on the server, for the worker's own spans (empty: no traces).
	AttemptTraceParent string `json:"attempt_traceparent,omitempty"`
}

// ClaimResponse lists the leased tasks (empty when the wait ran out).
type ClaimResponse struct {
	Tasks []ClaimedTask `json:"tasks"`
}

func (s *Server) claim(w http.ResponseWriter, r *http.Request) error {
	var req ClaimRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	wait := time.Duration(req.Wait)
	if wait < 0 || wait > s.opts.MaxWait {
		return &apiError{code: codeInvalidInput, field: "wait", detail: fmt.Sprintf("wait: must be between 0s and %s", s.opts.MaxWait)}
	}
	if req.ClaimID != "" {
		if err := checkClaimID(req.ClaimID); err != nil {
			return err
		}
	}
	p := remote.Claim{Queues: req.Queues, Kinds: req.Kinds, WorkerID: req.WorkerID, Max: req.Max,
		Lease: time.Duration(req.Lease)}
	if backstop.ValidID(req.WorkerID) == nil {
		s.seeWorker(r, req.WorkerID, req.Queues)
	}
	stop, done := s.stops.start(req.ClaimID)
	tasks, err := s.claimWait(r.Context(), stop, p, wait)
	done()
	if err != nil {
		return err
	}
	if r.Context().Err() != nil && len(tasks) > 0 {
		// The worker hung up after the claim committed (a client that
		// cuts its long poll instead of stopping it by claim_id; a
		// second signal): nobody will get these leases, so give the
		// tasks back now, uncharged, instead of at lease expiry. Best
		// effort only: the worker can hang up after this check, while
		// the answer is written or read (claimstop.go is the fix).
		for _, t := range tasks {
			if _, err := s.rp.Release(context.WithoutCancel(actorContext(r)), t.ID, t.LeaseToken, nil); err != nil {
				s.log.Warn("releasing a claim nobody received", "task_id", t.ID, "error", err)
			}
		}
		return r.Context().Err()
	}
	who := principalFrom(r.Context())
	out := ClaimResponse{Tasks: make([]ClaimedTask, len(tasks))}
	for i, t := range tasks {
		// Workers get their payloads as stored: they need them to work.
		v := view(principal{worker: true}, t.Task, false)
		out.Tasks[i] = ClaimedTask{TaskView: v, LeaseToken: t.LeaseToken, AttemptTraceParent: s.rp.TraceParent(t.ExecutionID)}
	}
	if len(tasks) > 0 {
		ids := make([]string, len(tasks))
		for i, t := range tasks {
			ids[i] = t.ID
		}
		s.log.Info("tasks claimed", "actor", who.Name, "worker_id", req.WorkerID, "tasks", len(tasks), "task_ids", ids)
		for _, t := range tasks {
			s.log.Debug("task claimed", append([]any{"actor", who.Name, "worker_id", req.WorkerID}, engine.TaskLogAttrs(t.Task)...)...)
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

// claimWait claims, and while nothing is claimable waits for a store
// wake-up (or the poll interval, or a rate limit's next token) until wait
// runs out, or stop is closed (the worker stopped the claim by its id: no
// claim starts after that, and one running finishes and is answered). A
// claim is never cut off half-way by the caller going away: the tasks it
// leased would be lost until their leases expire.
func (s *Server) claimWait(ctx context.Context, stop <-chan struct{}, p remote.Claim, wait time.Duration) ([]remote.Lease, error) {
	deadline := time.Now().Add(wait)
	for {
		select {
		case <-stop:
			return nil, nil
		default:
		}
		woken := s.waker.wait()
		claimAt := s.rp.Now()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		tasks, err := s.rp.Claim(cctx, p)
		cancel()
		if err != nil || len(tasks) > 0 {
			return tasks, err
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return tasks, nil
		}
		select {
		case <-s.quit:
			return nil, nil
		default:
		}
		if f := s.claimWaiting.Load(); f != nil {
			(*f)()
		}
		// A rate limit that held the claim back has its next token then.
		t := time.NewTimer(min(left, s.rp.ClaimRetry(ctx, p.Queues, claimAt, s.opts.PollInterval)))
		select {
		case <-woken:
		case <-t.C:
		case <-ctx.Done():
		case <-s.quit:
		case <-stop:
		}
		t.Stop()
		if ctx.Err() != nil {
			return nil, nil
		}
		select {
		case <-s.quit:
			return nil, nil
		default:
		}
	}
}

// HeartbeatRequest is POST /v1/tasks/{id}/heartbeat.
type HeartbeatRequest struct {
	LeaseToken string       `json:"lease_token"`
	Progress   *bt.Progress `json:"progress"`
	// Lease: extend the lease to now + this. Default 30s.
	Lease bt.Duration `json:"lease"`
	// WorkerID (optional) marks that worker seen in the registry.
	WorkerID string `json:"worker_id,omitempty"`
}

// HeartbeatResponse tells the worker when its lease ends and whether an
// operator canceled the task.
type HeartbeatResponse = remote.BeatResult

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) error {
	var req HeartbeatRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	return s.beat(w, r, req)
}

// ProgressRequest is POST /v1/tasks/{id}/progress: a heartbeat that must
// carry progress.
type ProgressRequest struct {
	LeaseToken string       `json:"lease_token"`
	Progress   *bt.Progress `json:"progress"`
	Lease      bt.Duration  `json:"lease"`
	WorkerID   string       `json:"worker_id,omitempty"`
}

func (s *Server) progress(w http.ResponseWriter, r *http.Request) error {
	var req ProgressRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Progress == nil {
		return &apiError{code: codeInvalidInput, field: "progress", detail: "progress: is required"}
	}
	return s.beat(w, r, HeartbeatRequest(req))
}

func (s *Server) beat(w http.ResponseWriter, r *http.Request, req HeartbeatRequest) error {
	res, err := s.rp.Heartbeat(actorContext(r), remote.Beat{TaskID: r.PathValue("id"), LeaseToken: req.LeaseToken,
		Progress: req.Progress, Lease: time.Duration(req.Lease)})
	if err != nil {
		return err
	}
	if backstop.ValidID(req.WorkerID) == nil {
		s.seeWorker(r, req.WorkerID, nil)
	}
	return writeJSON(w, http.StatusOK, res)
}

// CompleteRequest is POST /v1/tasks/{id}/complete.
type CompleteRequest struct {
	LeaseToken string       `json:"lease_token"`
	Progress   *bt.Progress `json:"progress"`
	// Result is the attempt's JSON result (any JSON value, at most
	// backstop.MaxResultBytes): a workflow step's output.
	Result json.RawMessage `json:"result,omitempty"`
}

// SettleResponse is the engine's decision about the reported attempt.
type SettleResponse = remote.Result

func (s *Server) complete(w http.ResponseWriter, r *http.Request) error {
	var req CompleteRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	res, err := s.rp.Complete(actorContext(r), r.PathValue("id"), req.LeaseToken, req.Progress, req.Result)
	if err != nil {
		return err
	}
	s.log.Debug("task completed", append([]any{"actor", principalFrom(r.Context()).Name, "task_id", res.TaskID},
		traceArgs(res.Span)...)...)
	return writeJSON(w, http.StatusOK, res)
}

// FailRequest is POST /v1/tasks/{id}/fail.
type FailRequest struct {
	LeaseToken string `json:"lease_token"`
	// Outcome: transient_error, permanent_error, timeout or canceled (a
	// task whose cancel was requested ends canceled whatever the outcome).
	Outcome bt.Outcome `json:"outcome"`
	// RetryAfter (transient_error only): run again after this long without
	// charging the attempt, like a Go handler's RetryAfter.
	RetryAfter  *bt.Duration `json:"retry_after"`
	Error       string       `json:"error"`
	ErrorDetail string       `json:"error_detail"`
	Progress    *bt.Progress `json:"progress"`
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request) error {
	var req FailRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	f := remote.Failure{TaskID: r.PathValue("id"), LeaseToken: req.LeaseToken, Outcome: req.Outcome,
		Error: req.Error, ErrorDetail: req.ErrorDetail, Progress: req.Progress}
	if req.RetryAfter != nil {
		d := time.Duration(*req.RetryAfter)
		f.RetryAfter = &d
	}
	res, err := s.rp.Fail(actorContext(r), f)
	if err != nil {
		return err
	}
	s.log.Info("task attempt failed (remote)", append(append([]any{"actor", principalFrom(r.Context()).Name}, resultTaskAttrs(res)...),
		append([]any{"outcome", res.Outcome, "state", res.State}, traceArgs(res.Span)...)...)...)
	return writeJSON(w, http.StatusOK, res)
}
