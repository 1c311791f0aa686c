// Package backstop is the Go library of Backstop, a durable task queue and
// transactional outbox whose signature is the failure path: nothing enqueued
// is lost, every attempt is recorded and classified, and dead letters keep
// everything needed to replay them under their original id.
//
// A Client enqueues and inspects tasks; a Worker claims and runs them with
// handlers registered by kind. Both sit on a store.Store (SQLite or
// PostgreSQL). Policy — validation, retry delays, dead-letter decisions —
// lives here; stores only apply it.
package backstop

import bt "github.com/backstophq/backstop/backstoptype"

// Re-exported value types, so library users import one package.
type (
	Task        = bt.Task
	Execution   = bt.Execution
	State       = bt.State
	Outcome     = bt.Outcome
	DeadReason  = bt.DeadReason
	Progress    = bt.Progress
	RetryPolicy = bt.RetryPolicy
	Duration    = bt.Duration
)

const (
	StateScheduled = bt.StateScheduled
	StatePending   = bt.StatePending
	StateRunning   = bt.StateRunning
	StateSucceeded = bt.StateSucceeded
	StateDead      = bt.StateDead
	StateCanceled  = bt.StateCanceled
	StateBuffered  = bt.StateBuffered
)

const (
	OutcomeSucceeded      = bt.OutcomeSucceeded
	OutcomeTransientError = bt.OutcomeTransientError
	OutcomePermanentError = bt.OutcomePermanentError
	OutcomeTimeout        = bt.OutcomeTimeout
	OutcomeCanceled       = bt.OutcomeCanceled
	OutcomeLeaseExpired   = bt.OutcomeLeaseExpired
	OutcomeSnoozed        = bt.OutcomeSnoozed
	OutcomeReleased       = bt.OutcomeReleased
)

const (
	ReasonAttemptsExhausted = bt.ReasonAttemptsExhausted
	ReasonPermanentError    = bt.ReasonPermanentError
	ReasonExpired           = bt.ReasonExpired
	ReasonPoison            = bt.ReasonPoison
)
