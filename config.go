package backstop

import (
	"encoding/json"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/traceids"
)

// The configuration, the error model and the enqueue rules are the
// engine's (internal/engine); the library names them here.

type (
	// Config configures a Client. Zero values take the default named at the
	// end of each field's comment.
	Config = engine.Config
	// RetentionConfig says how long finished work is kept.
	RetentionConfig = engine.RetentionConfig
	// QueueConfig is the policy of one queue.
	QueueConfig = engine.QueueConfig
	// KindConfig is the policy of one kind; it overrides its queue's.
	KindConfig = engine.KindConfig
	// MergeRule says how a payload merges into a waiting task's.
	MergeRule = engine.MergeRule
	// ComplexityPolicy says when a task of a queue is too complex.
	ComplexityPolicy = engine.ComplexityPolicy
	// OrderingConfig turns on ordered processing for a queue.
	OrderingConfig = engine.OrderingConfig
	// OrderingRollout selects the ordered tasks while ordering is rolled
	// out on a queue (OrderingConfig.EnabledFor).
	OrderingRollout = engine.OrderingRollout
	// OrderingStats counts ordered processing.
	OrderingStats = engine.OrderingStats
	// OrderingKey is one ordering key's state.
	OrderingKey = engine.OrderingKey
	// Gap is a run of sequences of an ordering key that never arrived.
	Gap = engine.Gap
	// Clock tells the library the time.
	Clock = engine.Clock
	// EnqueueParams describes one task to enqueue. Queue and Kind are
	// required.
	EnqueueParams = engine.EnqueueParams
	// EnqueueResult is what happened to one enqueued task.
	EnqueueResult = engine.EnqueueResult
	// Debounce delays a task until its key is quiet, never longer than a
	// maximum wait (EnqueueParams.Debounce, docs/keys.md).
	Debounce = engine.Debounce
	// BatchError says which task of a batch was refused; nothing was
	// written.
	BatchError = engine.BatchError
	// ValidationError is bad input, naming the field.
	ValidationError = engine.ValidationError
)

// Merge rules.
const (
	MergeReplace = engine.MergeReplace
	MergeAppend  = engine.MergeAppend
)

// Defaults and bounds.
const (
	DefaultMaxFanOutBytes   = engine.DefaultMaxFanOutBytes
	DefaultRedriveHeartbeat = engine.DefaultRedriveHeartbeat
	DefaultStoreRetry       = engine.DefaultStoreRetry
	DefaultWhereCost        = engine.DefaultWhereCost
	DefaultWhereTime        = engine.DefaultWhereTime
	MaxAttemptsLimit        = engine.MaxAttemptsLimit
	MaxResultBytes          = engine.MaxResultBytes
	LeaseKeyRefresh         = engine.LeaseKeyRefresh
	MaxLeaseKeyGrace        = engine.MaxLeaseKeyGrace
	TooComplexAttribute     = engine.TooComplexAttribute
	RunAttribute            = engine.RunAttribute
	// OrderingRolloutAttribute marks a task a queue's rollout of ordering
	// left unordered (value "out").
	OrderingRolloutAttribute = engine.OrderingRolloutAttribute
)

var (
	// RealClock is the wall clock, truncated to microseconds like the
	// stores.
	RealClock = engine.RealClock
	// DefaultOrderingBackoff is the drain schedule when none is configured.
	DefaultOrderingBackoff = engine.DefaultOrderingBackoff
)

// Sentinel errors; every error the library returns wraps one of them where
// it applies.
var (
	ErrNotFound = engine.ErrNotFound
	ErrConflict = engine.ErrConflict
	// ErrInvalid marks bad input; nothing was written.
	ErrInvalid = engine.ErrInvalid
	// ErrTooLarge marks input refused for its size; it also wraps
	// ErrInvalid.
	ErrTooLarge = engine.ErrTooLarge
	// ErrWhereBudget marks a where that spent its budget.
	ErrWhereBudget = engine.ErrWhereBudget
	// ErrTaskCanceled is the cause (context.Cause) of a handler's context
	// when the task was canceled while it ran — by an operator, or by the
	// cancel of its workflow run. The handler should stop: whatever error
	// it then returns, the attempt ends canceled; if it returns nil (the
	// work was done), the attempt is a success, and a workflow step is
	// compensated with the rest of its run.
	ErrTaskCanceled = engine.ErrTaskCanceled
)

// Permanent wraps err so the task goes to the dead-letter queue at once
// instead of being retried.
func Permanent(err error) error { return engine.Permanent(err) }

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool { return engine.IsPermanent(err) }

// RetryAfter, returned by a handler, runs the task again after d without
// counting the attempt as a failure (it is recorded as "snoozed").
func RetryAfter(d time.Duration) error { return engine.RetryAfter(d) }

// ClassifyHTTPStatus turns an HTTP response status into a handler result:
// nil for 2xx/3xx, a transient error for 408, 429 and 5xx, a permanent one
// for the other 4xx.
func ClassifyHTTPStatus(code int) error { return engine.ClassifyHTTPStatus(code) }

// ClassifyPostgresError marks err permanent unless Postgres says retrying
// may help.
func ClassifyPostgresError(err error) error { return engine.ClassifyPostgresError(err) }

// ValidID reports whether s is acceptable as a task id.
func ValidID(s string) error { return engine.ValidID(s) }

// CheckTime refuses a time a producer gives that a store cannot hold.
func CheckTime(field string, t time.Time) error { return engine.CheckTime(field, t) }

// ValidateAttributes checks attribute keys and values.
func ValidateAttributes(attrs map[string]string) error { return engine.ValidateAttributes(attrs) }

// CheckResult checks an attempt's JSON result as every path that takes one
// does: valid JSON, at most MaxResultBytes, holding nothing a payload may
// not.
func CheckResult(b []byte) (json.RawMessage, error) { return engine.CheckResult(b) }

func invalid(field, format string, args ...any) error { return engine.Invalid(field, format, args...) }

// TraceIDGenerator is the OpenTelemetry SDK IDGenerator to build the
// Config's TracerProvider with (sdktrace.WithIDGenerator) so that a workflow
// run is one trace: the run's root span, recorded when the run stops, gets
// the ids its steps' spans already named as their parent (derived from the
// run id). Other spans get random ids.
func TraceIDGenerator() sdktrace.IDGenerator { return traceids.Generator() }
