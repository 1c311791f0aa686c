package backstop

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// The worker registry: every Worker registers when it starts, is seen on
// its heartbeat loop, says stopping when it drains and stopped when it is
// done. A worker that stops being seen for Config.WorkerStaleAfter reads as
// stale; its leases expire like any other and the maintenance leader's
// lease-expiry sweep gives its tasks back. Remote workers (the HTTP worker
// protocol) are registered and seen by the server on their claims and
// heartbeats (SeeWorker).

// WorkerInfo is one worker in the registry.
type WorkerInfo = store.WorkerInfo

// WorkerState is a registered worker's state.
type WorkerState = store.WorkerState

// Worker states (see store.WorkerState).
const (
	WorkerActive   = store.WorkerActive
	WorkerStopping = store.WorkerStopping
	WorkerStopped  = store.WorkerStopped
	WorkerStale    = store.WorkerStale
)

// WorkerListParams filters Workers: queue, derived state, cursor, limit
// (1-10000; default 100).
type WorkerListParams struct {
	Queue string
	State WorkerState
	// Labels: each of these labels has this value.
	Labels  map[string]string
	AfterID string
	Limit   int
}

// recentExecutions is how many executions Worker returns.
const recentExecutions = 20

// WorkerDetail is a worker with its most recent executions (newest first).
type WorkerDetail struct {
	WorkerInfo
	Executions []Execution `json:"executions"`
}

// Workers lists registered workers in id order.
func (c *Client) Workers(ctx context.Context, p WorkerListParams) ([]WorkerInfo, error) {
	p.Limit = cmp.Or(p.Limit, 100)
	if p.Limit < 1 || p.Limit > 10000 {
		return nil, invalid("limit", "must be between 1 and 10000")
	}
	if p.State != "" && !p.State.Valid() {
		return nil, invalid("state", "unknown worker state %q (use active, stopping, stopped or stale)", p.State)
	}
	if p.Queue != "" {
		if err := engine.ValidName(p.Queue); err != nil {
			return nil, invalid("queue", "%v", err)
		}
	}
	if err := checkWorkerCursor(p.AfterID); err != nil {
		return nil, err
	}
	for k, v := range p.Labels {
		if !engine.ValidAttrKey(k) {
			return nil, invalid("label", "key %q is not a valid label key", k)
		}
		if engine.CheckText("label", v) != nil {
			return nil, invalid("label", "value of %q is not valid UTF-8 text (or holds a NUL)", k)
		}
	}
	return c.store.ListWorkers(ctx, store.WorkerFilter{Queue: p.Queue, State: p.State, Labels: p.Labels, AfterID: p.AfterID,
		Limit: p.Limit, Now: c.now(), StaleAfter: c.cfg.WorkerStaleAfter})
}

// Worker returns one registered worker with its recent executions.
func (c *Client) Worker(ctx context.Context, id string) (*WorkerDetail, error) {
	w, err := c.store.GetWorker(ctx, id, c.now(), c.cfg.WorkerStaleAfter)
	if err != nil {
		return nil, err
	}
	ex, err := c.store.WorkerExecutions(ctx, store.WorkerExecutionFilter{WorkerID: id, Limit: recentExecutions})
	if err != nil {
		return nil, err
	}
	return &WorkerDetail{WorkerInfo: *w, Executions: ex}, nil
}

// WorkerExecutionParams selects a worker's executions, newest first: at
// most Limit (default recentExecutions, at most MaxExecutionsLimit) of
// Outcome ("": any), after the cursor After (a WorkerExecutionsPage.Next).
type WorkerExecutionParams struct {
	Limit   int
	After   string
	Outcome Outcome
}

// WorkerExecutionsPage is one page of a worker's executions and the cursor
// of the next ("" when no older execution is left).
type WorkerExecutionsPage struct {
	Items []Execution `json:"items"`
	Next  string      `json:"-"`
}

// workerOutcomes are the outcomes an execution can be recorded with.
var workerOutcomes = []Outcome{OutcomeSucceeded, OutcomeTransientError, OutcomePermanentError, OutcomeTimeout,
	OutcomeCanceled, OutcomeLeaseExpired, OutcomeSnoozed, OutcomeReleased}

// WorkerExecutions pages one worker's executions, newest first (unknown
// worker: ErrNotFound). The cursor is the last execution's start time (Unix
// microseconds) and id: "1732700000123456_<execution id>".
func (c *Client) WorkerExecutions(ctx context.Context, id string, p WorkerExecutionParams) (*WorkerExecutionsPage, error) {
	limit := cmp.Or(p.Limit, recentExecutions)
	if limit < 1 || limit > MaxExecutionsLimit {
		return nil, invalid("limit", "must be between 1 and %d", MaxExecutionsLimit)
	}
	if p.Outcome != "" && !slices.Contains(workerOutcomes, p.Outcome) {
		return nil, invalid("outcome", "unknown outcome %q (want one of %v)", p.Outcome, workerOutcomes)
	}
	// One more than asked tells whether a next page exists.
	f := store.WorkerExecutionFilter{WorkerID: id, Outcome: p.Outcome, Limit: limit + 1}
	if p.After != "" {
		k, err := parseExecutionCursor(p.After)
		if err != nil {
			return nil, err
		}
		f.Before = k
	}
	if checkWorkerCursor(id) != nil {
		// No worker can have it (and a NUL cannot even reach Postgres).
		return nil, fmt.Errorf("worker %q: %w", id, ErrNotFound)
	}
	if _, err := c.store.GetWorker(ctx, id, c.now(), c.cfg.WorkerStaleAfter); err != nil {
		return nil, err
	}
	ex, err := c.store.WorkerExecutions(ctx, f)
	if err != nil {
		return nil, err
	}
	page := &WorkerExecutionsPage{Items: ex}
	if len(ex) > limit {
		page.Items = ex[:limit:limit]
		last := ex[limit-1]
		page.Next = strconv.FormatInt(last.StartedAt.UnixMicro(), 10) + "_" + last.ExecutionID
	}
	return page, nil
}

// parseExecutionCursor reads a WorkerExecutionsPage.Next.
func parseExecutionCursor(s string) (*store.ExecutionKey, error) {
	at, id, ok := strings.Cut(s, "_")
	us, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || us < 0 || ValidID(id) != nil {
		return nil, invalid("after", "bad cursor %q: a cursor is the next_cursor of the previous page", s)
	}
	return &store.ExecutionKey{StartedAt: time.UnixMicro(us).UTC(), ExecutionID: id}, nil
}

// WorkerCounts counts registered workers by state (every state present).
func (c *Client) WorkerCounts(ctx context.Context) (map[WorkerState]int, error) {
	return c.store.CountWorkersByState(ctx, c.now(), c.cfg.WorkerStaleAfter)
}

// WorkerHeartbeatInterval is how often a remote worker should say it is
// alive: a quarter of the stale TTL, so that three beats may be lost.
func (c *Client) WorkerHeartbeatInterval() time.Duration {
	return max(c.cfg.WorkerStaleAfter/4, 10*time.Millisecond)
}

// markLostWorkers writes worker.heartbeat_lost, once, for each worker that
// went stale (Maintain).
func (c *Client) markLostWorkers(ctx context.Context) error {
	ids, err := c.store.MarkLostWorkers(ctx, c.now(), c.cfg.WorkerStaleAfter)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		c.cfg.Logger.Warn("workers stopped heartbeating", "workers", ids, "stale_after", c.cfg.WorkerStaleAfter.String())
	}
	return nil
}

// registryInterval is how often the heartbeat loop marks the worker seen:
// well inside the stale TTL.
func (w *Worker) registryInterval() time.Duration {
	return max(min(w.cfg.HeartbeatInterval, w.c.cfg.WorkerStaleAfter/4), 10*time.Millisecond)
}

func (w *Worker) register(ctx context.Context) {
	host, _ := os.Hostname()
	queues := make([]string, 0, len(w.queues))
	for _, q := range w.queues {
		queues = append(queues, q.name)
	}
	slices.Sort(queues)
	info := WorkerInfo{ID: w.cfg.ID, Host: host, PID: os.Getpid(), Queues: queues, Version: w.cfg.Version,
		Labels: w.cfg.Labels, StartedAt: w.c.now()}
	if err := w.c.store.RegisterWorker(context.WithoutCancel(ctx), info); err != nil {
		// The registry is for operators; a failure must not stop work.
		w.log.Warn("worker registration failed", "error", err)
	}
}

func (w *Worker) seen(ctx context.Context) {
	if err := w.c.store.TouchWorkers(ctx, []string{w.cfg.ID}, w.c.now()); err != nil && ctx.Err() == nil {
		w.log.Warn("worker registry heartbeat failed", "error", err)
	}
}

func (w *Worker) setRegistryState(st WorkerState) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.store.SetWorkerState(ctx, w.cfg.ID, st, w.c.now()); err != nil {
		w.log.Warn(fmt.Sprintf("worker registry: marking %s failed", st), "error", err)
	}
}

// WorkerHeartbeatHorizon bounds HeartbeatingWorkers: a worker not seen for
// longer is left out (it is gone; BackstopNoWorkers and the stale count
// cover a fleet that is gone), so a per-worker heartbeat alert resolves
// by itself an hour after a worker died for good.
const WorkerHeartbeatHorizon = time.Hour

// maxHeartbeatWorkers caps HeartbeatingWorkers per state (the gauge's
// cardinality).
const maxHeartbeatWorkers = 1000

// HeartbeatingWorkers lists the registered workers that should be
// heartbeating — active, stopping, or stale but seen within
// WorkerHeartbeatHorizon — for the per-worker heartbeat gauge
// (backstop_worker_heartbeat_age_seconds).
func (c *Client) HeartbeatingWorkers(ctx context.Context) ([]WorkerInfo, error) {
	var out []WorkerInfo
	since := c.now().Add(-WorkerHeartbeatHorizon)
	for _, st := range []WorkerState{WorkerActive, WorkerStopping, WorkerStale} {
		ws, err := c.Workers(ctx, WorkerListParams{State: st, Limit: maxHeartbeatWorkers})
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			if !w.LastSeen.Before(since) {
				out = append(out, w)
			}
		}
	}
	return out, nil
}
