// Package remote is the server side of the remote worker protocol, as the
// HTTP API (internal/api) and the tests see it: a worker in another process
// (any language, over HTTP) claims tasks, heartbeats them and reports how
// each attempt ended. The engine (the root package) makes every decision
// with the rules it applies to in-process handlers; it implements Protocol
// over a Client's internals (remote.go and the files it names at the root)
// and installs the accessor (Install) when it is initialised, so the
// protocol is not part of the library's public surface and this package
// never imports the root (which imports it).
package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// ErrLeaseNotCurrent: a remote worker named a lease (its lease token) that
// is no longer the task's current lease; nothing changed. It wraps
// store.ErrConflict (the root's ErrConflict, which the HTTP API answers
// with 409).
var ErrLeaseNotCurrent = fmt.Errorf("lease not current: %w", store.ErrConflict)

// Limits of the remote worker protocol.
const (
	MaxClaim     = 1000
	DefaultLease = 30 * time.Second
	MinLease     = time.Second
	MaxLease     = time.Hour
	MaxQueues    = 64
)

// Protocol is the server side of the remote worker protocol over one
// Client. Every call's events name the caller's actor (backstop.WithActor;
// none: "library").
type Protocol interface {
	// Claim leases up to p.Max claimable tasks from p.Queues, in the order
	// given, without waiting.
	Claim(ctx context.Context, p Claim) ([]Lease, error)
	// Heartbeat extends a remote attempt's lease and stores its progress. A
	// lease that is not current gives ErrLeaseNotCurrent and changes
	// nothing.
	Heartbeat(ctx context.Context, b Beat) (*BeatResult, error)
	// Complete reports that a remote attempt succeeded, with its JSON
	// result (nil: none; at most backstop.MaxResultBytes).
	Complete(ctx context.Context, taskID, leaseToken string, p *bt.Progress, result json.RawMessage) (*Result, error)
	// CompleteMany reports many successful remote attempts at once: they
	// are settled together (one store write per up to 500), each only while
	// its lease is current, and each gets its own answer, as Complete would
	// give.
	CompleteMany(ctx context.Context, cs []Completion) ([]Outcome, error)
	// Fail reports a failed remote attempt; the engine retries or
	// dead-letters the task by the same rules as for an in-process handler.
	Fail(ctx context.Context, f Failure) (*Result, error)
	// Release gives a remote attempt back without charging it: the task
	// goes back to pending at once with its attempt count unchanged, and
	// the execution is recorded as released, exactly as an in-process
	// worker releases its running tasks when its grace period runs out on a
	// drain. A stale token is ErrLeaseNotCurrent and changes nothing.
	Release(ctx context.Context, taskID, leaseToken string, p *bt.Progress) (*Result, error)

	// AppendLogs appends a remote worker's lines to the execution its lease
	// token names, within the execution's bound. A token that is not the
	// task's current lease, or not a token at all, is ErrLeaseNotCurrent
	// (nothing written). Lines of one execution must come from one sender
	// at a time.
	AppendLogs(ctx context.Context, taskID, leaseToken string, lines []LogLine) (LogResult, error)
	// TraceParent is the W3C traceparent of the consumer span of the remote
	// attempt executionID names, for the worker's own spans to take as
	// parent; empty when no trace is recorded (no tracer provider, or the
	// attempt was claimed through another process).
	TraceParent(executionID string) string

	// RegisterWorker registers a remote worker as it starts: its row
	// afresh, state active, started and seen now, and its worker.started
	// event (actor: ctx's). It returns the row.
	RegisterWorker(ctx context.Context, w store.WorkerInfo) (*store.WorkerInfo, error)
	// WorkerHeartbeat marks a registered remote worker seen now; with
	// draining, it says stopping. ErrNotFound when it is not registered
	// (the worker registers again).
	WorkerHeartbeat(ctx context.Context, id string, draining bool) (*store.WorkerInfo, error)
	// StopWorker records that a remote worker drained and stopped (state
	// stopped, seen now, worker.stopped). ErrNotFound when it is not
	// registered.
	StopWorker(ctx context.Context, id string) (*store.WorkerInfo, error)
	// SeeWorker records that a remote worker is alive (its claim or
	// heartbeat reached the server); the first sighting registers it (a
	// worker that did not register itself: RegisterWorker).
	SeeWorker(ctx context.Context, id, host string, queues []string) error
}

var of func(client any) Protocol

// Install sets how Of reaches a client's protocol. The root package calls
// it once, when it is initialised; nothing else may.
func Install(f func(client any) Protocol) { of = f }

// Of is the protocol of client, a *backstop.Client (typed as any because
// this package cannot import the root; anything else panics).
func Of(client any) Protocol { return of(client) }

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
	// (invalid when none was recorded here), for the caller's logs; not
	// part of the answer's JSON.
	Span trace.SpanContext `json:"-"`
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
