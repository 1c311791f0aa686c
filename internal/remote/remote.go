// Package remote is the server side of the remote worker protocol
// (Server, over the engine), as the HTTP API (internal/api) serves it: a
// worker in another process claims tasks, heartbeats them, reports how
// each attempt ended, sends its log lines and keeps its registry row.
package remote

import (
	"encoding/json"
	"time"

	"github.com/backstophq/backstop/internal/engine"

	"go.opentelemetry.io/otel/trace"

	bt "github.com/backstophq/backstop/backstoptype"
)

// ErrLeaseNotCurrent: a remote worker named a lease (its lease token) that
// is no longer the task's current lease; nothing changed. It wraps
// store.ErrConflict (the root's ErrConflict, which the HTTP API answers
// with 409).
var ErrLeaseNotCurrent = engine.ErrLeaseNotCurrent

// Limits of the remote worker protocol.
const (
	MaxClaim     = 1000
	DefaultLease = 30 * time.Second
	MinLease     = time.Second
	MaxLease     = time.Hour
	MaxQueues    = 64
)

// Claim asks for tasks on behalf of a remote worker.
type Claim struct {
	Queues   []string
	Kinds    []string // empty: any kind
	WorkerID string
	Max      int           // default 1, at most MaxClaim
	Lease    time.Duration // default DefaultLease
}

// Lease is a task leased to a remote worker and the lease token that
// proves it: a secret for the worker alone, which every later call about
// the attempt names.
type Lease struct {
	*bt.Task
	LeaseToken string
}

// Beat extends one remote attempt's lease.
type Beat struct {
	TaskID     string
	LeaseToken string
	Progress   *bt.Progress  // nil: unchanged
	Lease      time.Duration // default DefaultLease
}

// BeatResult is what a heartbeat tells the remote worker.
type BeatResult struct {
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	// CancelRequested: an operator canceled the task; stop and report
	// (any outcome settles it as canceled).
	CancelRequested bool `json:"cancel_requested"`
}

// Result is the engine's decision about a reported attempt.
type Result struct {
	TaskID     string        `json:"task_id"`
	Outcome    bt.Outcome    `json:"outcome"`
	State      bt.State      `json:"state"`
	RunAt      *time.Time    `json:"run_at,omitempty"`
	DeadReason bt.DeadReason `json:"reason,omitempty"`

	// Span is the span context of the settled attempt's consumer span
	// (invalid when none was recorded here), and Task the settled task as
	// far as it was read (nil: not read), for the caller's logs; not part
	// of the answer's JSON.
	Span trace.SpanContext `json:"-"`
	Task *bt.Task          `json:"-"`
}

// Failure reports how a remote attempt failed.
type Failure struct {
	TaskID     string
	LeaseToken string
	// Outcome: transient_error (retry by policy), permanent_error
	// (dead-letter now) or timeout (retry by policy, recorded as timeout).
	Outcome bt.Outcome
	// RetryAfter, with a transient outcome, runs the task again after this
	// long without counting the attempt as a failure, exactly like a Go
	// handler returning RetryAfter(d); it is recorded as snoozed.
	RetryAfter  *time.Duration
	Error       string
	ErrorDetail string
	Progress    *bt.Progress
}

// Completion is one successful remote attempt of a batch.
type Completion struct {
	TaskID     string
	LeaseToken string
	Progress   *bt.Progress
	Result     json.RawMessage // the attempt's JSON result (nil: none)
}

// Outcome is the result of one completion of a batch: the decision, or why
// it was refused (ErrLeaseNotCurrent, ErrNotFound, ErrInvalid).
type Outcome struct {
	Result *Result
	Err    error
}

// LogLine is a line a remote worker sends.
type LogLine struct {
	Stream string `json:"stream,omitempty"` // stdout, stderr, log, or output (the default)
	Line   string `json:"line"`
}

// LogResult says how many lines were kept (the rest fell beyond the
// execution's bound).
type LogResult struct {
	Accepted  int  `json:"accepted"`
	Truncated bool `json:"truncated"`
}
