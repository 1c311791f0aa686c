// Package backstoptype holds the small value types shared by the public
// library, the store seam and the store drivers, so that none of them has to
// import another. It must never import anything from Backstop itself.
package backstoptype

import (
	"encoding/json"
	"slices"
	"time"
)

// State is where a task is in its lifecycle.
type State string

const (
	StateScheduled State = "scheduled" // waiting for run_at
	StatePending   State = "pending"   // ready to be claimed
	StateRunning   State = "running"   // leased by a worker
	StateSucceeded State = "succeeded" // finished
	StateDead      State = "dead"      // in the dead-letter queue
	StateCanceled  State = "canceled"  // canceled by an operator
	StateBuffered  State = "buffered"  // ordering: waiting for a gap to fill
)

// States lists every state, in lifecycle order.
var States = []State{StateScheduled, StatePending, StateBuffered, StateRunning, StateSucceeded, StateDead, StateCanceled}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	return slices.Contains(States, s)
}

// Live reports whether a task in this state may still run.
func (s State) Live() bool {
	switch s {
	case StateScheduled, StatePending, StateRunning, StateBuffered:
		return true
	}
	return false
}

// Outcome classifies how one attempt (execution) ended.
type Outcome string

const (
	OutcomeSucceeded      Outcome = "succeeded"
	OutcomeTransientError Outcome = "transient_error"
	OutcomePermanentError Outcome = "permanent_error"
	OutcomeTimeout        Outcome = "timeout"
	OutcomeCanceled       Outcome = "canceled"
	OutcomeLeaseExpired   Outcome = "lease_expired"
	// OutcomeSnoozed is a handler asking to run again later (RetryAfter); it
	// is recorded but not charged as an attempt.
	OutcomeSnoozed Outcome = "snoozed"
	// OutcomeReleased is an attempt given back on graceful shutdown; it is
	// recorded but not charged as an attempt.
	OutcomeReleased Outcome = "released"
)

// Charged reports whether an attempt with this outcome counts against
// max_attempts.
func (o Outcome) Charged() bool { return o != OutcomeSnoozed && o != OutcomeReleased }

// DeadReason says why a task became a dead letter.
type DeadReason string

const (
	ReasonAttemptsExhausted DeadReason = "attempts_exhausted"
	ReasonPermanentError    DeadReason = "permanent_error"
	ReasonExpired           DeadReason = "expired" // deadline passed
	ReasonPoison            DeadReason = "poison"  // undecodable payload or no handler
)

// DeadReasons lists every dead-letter reason.
var DeadReasons = []DeadReason{ReasonAttemptsExhausted, ReasonPermanentError, ReasonExpired, ReasonPoison}

// DLQStatus is the status of a dead-letter record.
type DLQStatus string

const (
	DLQOpen      DLQStatus = "open"      // waiting for an operator
	DLQReplayed  DLQStatus = "replayed"  // copied under a new id (--new-id)
	DLQDiscarded DLQStatus = "discarded" // dropped on purpose, with a reason
	DLQResolved  DLQStatus = "resolved"  // handled by hand
)

// Progress is how far a task got, carried across retries and replays.
type Progress struct {
	Total     int `json:"total_steps"`
	Completed int `json:"completed_steps"`
}

// Task is one unit of work and, when dead, its dead-letter record.
type Task struct {
	ID          string            `json:"id"`
	Queue       string            `json:"queue"`
	Kind        string            `json:"kind"`
	State       State             `json:"state"`
	Attempt     int               `json:"attempt"`
	MaxAttempts int               `json:"max_attempts"`
	Payload     json.RawMessage   `json:"payload"`
	Attributes  map[string]string `json:"attributes"`
	Priority    int               `json:"priority"`
	RunAt       time.Time         `json:"run_at"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	LastError   string            `json:"last_error"`
	Progress    Progress          `json:"progress"`

	Timeout        Duration     `json:"timeout,omitempty"`
	Deadline       *time.Time   `json:"deadline,omitempty"`
	Retry          *RetryPolicy `json:"retry,omitempty"`
	IdempotencyKey string       `json:"idempotency_key,omitempty"`
	MergeKey       string       `json:"merge_key,omitempty"`
	MergeCount     int          `json:"merge_count,omitempty"`
	Complexity     float64      `json:"complexity,omitempty"`
	TraceParent    string       `json:"trace_parent,omitempty"`
	PayloadSize    int          `json:"payload_size"`
	PayloadSpilled bool         `json:"payload_spilled,omitempty"`
	// UniqueUntil: a task enqueued with a window on its idempotency key
	// holds the key until then, whatever its state (unique per period).
	UniqueUntil *time.Time `json:"unique_until,omitempty"`

	// The current (or last) lease.
	WorkerID          string     `json:"worker_id,omitempty"`
	ExecutionID       string     `json:"execution_id,omitempty"`
	AttemptedAt       *time.Time `json:"attempted_at,omitempty"`
	LeaseExpiresAt    *time.Time `json:"lease_expires_at,omitempty"`
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
	FinalizedAt       *time.Time `json:"finalized_at,omitempty"`

	// Dead-letter record; kept when the task is replayed.
	DeadReason   DeadReason `json:"reason,omitempty"`
	FirstSeen    *time.Time `json:"first_seen,omitempty"`
	LastSeen     *time.Time `json:"last_seen,omitempty"`
	DeadCount    int        `json:"dead_count,omitempty"`
	ReplayCount  int        `json:"replay_count,omitempty"`
	DLQStatus    DLQStatus  `json:"dlq_status,omitempty"`
	ReplayedFrom string     `json:"replayed_from,omitempty"`

	// Ordered processing (docs/ordering.md): the key and sequence, and the
	// gaps reported with a task released by a drain that gave up.
	OrderingKey string `json:"ordering_key,omitempty"`
	Sequence    int64  `json:"sequence,omitempty"`
	Gaps        []Gap  `json:"gaps,omitempty"`
	// OrderingWait says why a buffered task waits (its ordering status and
	// what its key waits for); empty for a task that does not wait.
	OrderingWait string `json:"ordering_wait,omitempty"`
	// Waiting says which limit holds a pending task back ("concurrency
	// limit heavy5 tenant=acme 5/5", "rate limit mail100 100/s"); empty
	// when none does.
	Waiting string `json:"waiting,omitempty"`
	// Debounce is a debounced task's debounce (read with the task by
	// Client.Get; nil for a task that is not debounced).
	Debounce *TaskDebounce `json:"debounce,omitempty"`

	Executions []Execution `json:"executions,omitempty"`
}

// TaskDebounce is how a debounced task waits: its key (its merge key),
// the quiet period of its latest debounced enqueue (it runs once its key
// has been quiet that long: its run_at) and, with a max wait, the time it
// runs at the latest (its first enqueue plus the max wait).
type TaskDebounce struct {
	Key          string     `json:"key"`
	For          Duration   `json:"for"`
	MaxWaitUntil *time.Time `json:"max_wait_until,omitempty"`
}

// Execution is one attempt at running a task.
type Execution struct {
	ExecutionID string     `json:"execution_id"`
	TaskID      string     `json:"task_id"`
	Attempt     int        `json:"attempt"`
	WorkerID    string     `json:"worker_id"`
	StartedAt   time.Time  `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	Outcome     Outcome    `json:"outcome"`
	Error       string     `json:"error"`
	ErrorDetail string     `json:"error_detail,omitempty"`
}
