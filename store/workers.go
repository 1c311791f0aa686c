package store

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// WorkerState is a worker's state in the registry.
type WorkerState string

// Worker states. A worker says active, stopping (draining) or stopped; a
// worker that says active or stopping but has not been seen for the stale
// TTL is stale (derived when read, never written). A stale worker's leases
// run out like any other and the lease-expiry sweep reclaims them.
const (
	WorkerActive   WorkerState = "active"
	WorkerStopping WorkerState = "stopping"
	WorkerStopped  WorkerState = "stopped"
	WorkerStale    WorkerState = "stale"
)

// WorkerStates lists the states in display order.
var WorkerStates = []WorkerState{WorkerActive, WorkerStopping, WorkerStopped, WorkerStale}

// Valid reports whether s is a known worker state.
func (s WorkerState) Valid() bool {
	return slices.Contains(WorkerStates, s)
}

// WorkerInfo is one worker instance in the registry.
type WorkerInfo struct {
	ID        string            `json:"id"`
	Host      string            `json:"host"`
	PID       int               `json:"pid"`
	Queues    []string          `json:"queues"`
	Version   string            `json:"version"`
	Labels    map[string]string `json:"labels"`
	Remote    bool              `json:"remote"`
	State     WorkerState       `json:"state"`
	StartedAt time.Time         `json:"started_at"`
	LastSeen  time.Time         `json:"last_seen"`
	StoppedAt *time.Time        `json:"stopped_at,omitempty"`
	// CurrentExecutionIDs are the executions the worker runs now: those
	// of the tasks whose live lease it holds (read from the leases, never
	// written), in id order; empty when it runs none.
	CurrentExecutionIDs []string `json:"current_execution_ids"`
}

// WorkerExecutionFilter selects a worker's executions, newest first
// (started_at, then execution id, both descending): those of Outcome
// ("": any) older than Before (nil: from the newest), at most Limit.
type WorkerExecutionFilter struct {
	WorkerID string
	Outcome  bt.Outcome
	Before   *ExecutionKey
	Limit    int
}

// ExecutionKey is an execution's place in the newest-first order.
type ExecutionKey struct {
	StartedAt   time.Time
	ExecutionID string
}

// WorkerFilter selects workers: by queue and derived state, after a cursor
// (id order), at most Limit. Now and StaleAfter derive the stale state.
type WorkerFilter struct {
	Queue      string
	State      WorkerState
	Labels     map[string]string // each label key has this value
	AfterID    string
	Limit      int
	Now        time.Time
	StaleAfter time.Duration
}

// Workers is the worker registry.
type Workers interface {
	// RegisterWorker writes the worker's row afresh (state active,
	// started_at and last_seen = w.StartedAt) and its worker.started event
	// (actor: ActorFrom(ctx, "")), in one transaction.
	RegisterWorker(ctx context.Context, w WorkerInfo) error
	// SeeWorker marks a worker seen at now; a worker not registered yet (a
	// remote worker's first claim, from a client that does not register)
	// is added with w's fields and started_at = now, and a stopped one
	// comes back active; both write worker.started. A stopping worker
	// stays stopping.
	SeeWorker(ctx context.Context, w WorkerInfo, now time.Time) error
	// TouchWorkers sets last_seen = now for the ids still registered.
	TouchWorkers(ctx context.Context, ids []string, now time.Time) error
	// SetWorkerState records stopping or stopped (stopped sets stopped_at)
	// and last_seen = now. Unknown id: ErrNotFound.
	SetWorkerState(ctx context.Context, id string, st WorkerState, now time.Time) error
	// MarkLostWorkers writes worker.heartbeat_lost, once, for each worker
	// that says active or stopping and was last seen before
	// now-staleAfter: a worker is marked when its event is written, and
	// unmarked when it is seen again (a later loss is written again). Safe
	// to run from many processes at once. Returns the ids it marked.
	MarkLostWorkers(ctx context.Context, now time.Time, staleAfter time.Duration) ([]string, error)
	// ListWorkers lists workers in id order.
	ListWorkers(ctx context.Context, f WorkerFilter) ([]WorkerInfo, error)
	// GetWorker returns one worker; ErrNotFound if unknown.
	GetWorker(ctx context.Context, id string, now time.Time, staleAfter time.Duration) (*WorkerInfo, error)
	// WorkerExecutions lists a worker's executions, newest first, as f
	// selects them.
	WorkerExecutions(ctx context.Context, f WorkerExecutionFilter) ([]bt.Execution, error)
	// CountWorkersByState counts workers by derived state (every state
	// present, zero included).
	CountWorkersByState(ctx context.Context, now time.Time, staleAfter time.Duration) (map[WorkerState]int, error)
}

// JoinQueues is how drivers store a worker's queues: ",a,b," so that one
// queue matches as the substring ",q,".
func JoinQueues(qs []string) string { return "," + strings.Join(qs, ",") + "," }

// SplitQueues reverses JoinQueues.
func SplitQueues(s string) []string {
	s = strings.Trim(s, ",")
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

// DeriveWorkerState is the state a reader sees: a worker that says active
// or stopping but was last seen before now-staleAfter is stale.
func DeriveWorkerState(said WorkerState, lastSeen, now time.Time, staleAfter time.Duration) WorkerState {
	if (said == WorkerActive || said == WorkerStopping) && lastSeen.Before(now.Add(-staleAfter)) {
		return WorkerStale
	}
	return said
}

// NewWorkerCounts is a count of every worker state, all zero.
func NewWorkerCounts() map[WorkerState]int {
	out := make(map[WorkerState]int, len(WorkerStates))
	for _, st := range WorkerStates {
		out[st] = 0
	}
	return out
}

// AddWorkerCount folds one row of a driver's count (the stored state,
// whether last_seen is older than the stale cut, how many) into counts by
// derived state: a worker not seen for too long is stale unless it stopped.
func AddWorkerCount(out map[WorkerState]int, state string, old bool, n int) {
	st := WorkerState(state)
	if old && st != WorkerStopped {
		st = WorkerStale
	}
	out[st] += n
}

// Worker lifecycle events (docs/events.md). Their subject is the worker's
// id; they have no queue or kind; their body names the worker's host, so
// the node.<host> stream finds them.
const (
	EventWorkerStarted       = "worker.started"
	EventWorkerHeartbeatLost = "worker.heartbeat_lost"
	EventWorkerStopped       = "worker.stopped"
)

// WorkerStartedEvent is the worker.started event of a registration.
func WorkerStartedEvent(w WorkerInfo, now time.Time, actor string) bt.Event {
	queues := w.Queues
	if queues == nil {
		queues = []string{}
	}
	b, _ := json.Marshal(struct {
		Host    string   `json:"host"`
		PID     int      `json:"pid"`
		Queues  []string `json:"queues"`
		Version string   `json:"version"`
		Remote  bool     `json:"remote"`
	}{w.Host, w.PID, queues, w.Version, w.Remote})
	return NewEvent(now, EventWorkerStarted, w.ID, "", "", actor, b)
}

// WorkerLostEvent is the worker.heartbeat_lost event of a worker last seen
// at lastSeen.
func WorkerLostEvent(id, host string, lastSeen, now time.Time, staleAfter time.Duration) bt.Event {
	b, _ := json.Marshal(map[string]any{"host": host, "last_seen": EventTime(lastSeen),
		"stale_after_ms": staleAfter.Milliseconds()})
	return NewEvent(now, EventWorkerHeartbeatLost, id, "", "", "", b)
}

// WorkerStoppedEvent is the worker.stopped event of a worker that said it
// stopped.
func WorkerStoppedEvent(id, host string, startedAt, now time.Time, actor string) bt.Event {
	b, _ := json.Marshal(map[string]any{"host": host, "started_at": EventTime(startedAt)})
	return NewEvent(now, EventWorkerStopped, id, "", "", actor, b)
}
