package engine

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/filter"
)

// Config configures the engine (and the library's Client). Zero values take the default named at the end
// of each field's comment.
type Config struct {
	// Clock tells the time. Default: RealClock.
	Clock Clock
	// Logger receives the library's structured logs. Default: slog.Default().
	Logger *slog.Logger
	// InlinePayloadLimit: payloads above this many bytes spill to side
	// storage. Default: 64 KiB.
	InlinePayloadLimit int
	// MaxPayloadSize: larger payloads are refused. Default: 8 MiB.
	MaxPayloadSize int
	// MaxFanOutBytes bounds the payload bytes of one workflow fan-out
	// (for_each) step, its items together (workflow.FanOutSize: each item
	// holds its element, its index and the results the step needs, never
	// the run's input). A run whose first steps pass it is refused
	// (ErrInvalid naming the bound, nothing written); a step that passes
	// it when it becomes ready later fails permanently. Default: 64 MiB.
	MaxFanOutBytes int64
	// MaxAttempts when neither task, kind nor queue says. Default: 25.
	MaxAttempts int
	// Retry when neither task, kind nor queue says. Default: exponential,
	// base 1s, factor 2, max 1h, full jitter.
	Retry *RetryPolicy
	// Queues declares per-queue settings.
	Queues map[string]QueueConfig
	// Kinds declares per-kind settings.
	Kinds map[string]KindConfig
	// StrictQueues refuses enqueues to queues not declared in Queues.
	// Default: false.
	StrictQueues bool
	// MeterProvider records the library's metrics. Default: otel's global.
	MeterProvider metric.MeterProvider
	// TracerProvider records the library's spans. Default: otel's global.
	TracerProvider trace.TracerProvider
	// LoggerProvider receives the library's OpenTelemetry log events
	// (enqueued, claimed, started, succeeded, retry scheduled, dead
	// letter, replays: docs/observability.md). Default: otel's global,
	// a no-op until an application installs one.
	LoggerProvider otellog.LoggerProvider
	// Retention says how long finished work is kept; the maintenance
	// leader deletes what is older.
	Retention RetentionConfig
	// WorkerStaleAfter: a registered worker not seen (no heartbeat, no
	// claim) for this long reads as stale. Default: 1m.
	WorkerStaleAfter time.Duration
	// RedactKeys: payload keys whose values are masked wherever a payload
	// leaves the store (package redact): added to redact.DefaultKeys; "!k"
	// removes a default.
	RedactKeys []string
	// RequireReason: every operator action (replay, redrive, discard,
	// resolve, purge, cancel) must give a reason; without one it is refused
	// (ErrInvalid naming "reason") and nothing is done. Default: false.
	RequireReason bool
	// PurgeFloor: no purge deletes a dead letter whose record changed less
	// than this long ago. PurgeDLQ refuses a smaller OlderThan unless
	// BelowFloor (an admin's explicit choice, recorded), and retention keeps
	// closed dead letters at least this long even when
	// Retention.DeadLetters is shorter (logged when the maintainer starts).
	// Default: 0, no floor (the server and CLI default to 7 days:
	// dlq.purge_floor).
	PurgeFloor time.Duration
	// RedriveHeartbeat: how often a running redrive records that its runner
	// is alive. ResumeRedrive refuses (ErrConflict) a redrive whose runner
	// was seen less than 3 heartbeats ago, unless forced. Default: 5s.
	RedriveHeartbeat time.Duration
	// WhereCost bounds the CEL cost of evaluating a where outside the SQL
	// subset in Go, summed over the tasks one call evaluates (one batch of
	// a redrive, a close or a purge): past it the call stops with
	// ErrWhereBudget (and ErrInvalid naming where); one task's evaluation
	// is also capped at 1,000,000. Default: 10,000,000 (one to two
	// CPU-seconds).
	WhereCost uint64
	// WhereTime bounds the wall time of the same evaluation, its reads
	// included. Default: 10s.
	WhereTime time.Duration
	// StoreRetry: how long a redrive, and each call of a bulk close
	// (CloseMatching), waits out a store that is temporarily unavailable
	// (store.ErrUnavailable: busy, disk full, a lost connection), trying
	// again after 100ms, 200ms, ... (at most 5s apart), before it gives up
	// with the last error; negative: never retry. Default: 1m.
	StoreRetry time.Duration
}

// RetentionConfig: how long finished tasks and closed dead letters are kept
// before the maintenance leader deletes them (with their executions,
// payloads and events). A negative duration keeps them forever.
type RetentionConfig struct {
	// Succeeded tasks, from when they finished. Default: 24h.
	Succeeded time.Duration
	// Canceled tasks, from when they were canceled. Default: 24h.
	Canceled time.Duration
	// DeadLetters that are discarded, resolved or replayed under a new id,
	// from their last change. Open dead letters are never deleted.
	// Default: 30 days.
	DeadLetters time.Duration
	// Interval between retention rounds. Default: 1m.
	Interval time.Duration
	// Events of the event log, from their time (docs/events.md). A task's
	// events also go when the task is deleted. Default: 7 days.
	Events time.Duration
	// Runs: workflow runs that finished for good (succeeded, partial,
	// compensated, canceled), from their end, with their step rows. A
	// failed or compensation_failed run is kept while a replay may resume
	// it (a step task of it is an open dead letter or still to settle).
	// Default: 7 days.
	Runs time.Duration
}

// QueueConfig is the policy of one queue.
type QueueConfig struct {
	// Concurrency is how many tasks of this queue one worker runs at once.
	// Default: 10.
	Concurrency int
	// MaxAttempts for tasks of this queue. Default: Config.MaxAttempts.
	MaxAttempts int
	// Retry policy for this queue. Default: Config.Retry.
	Retry *RetryPolicy
	// Timeout of one attempt. Default: none.
	Timeout time.Duration
	// Complexity says when a task of this queue is too complex
	// (complexity.go). Default: never.
	Complexity ComplexityPolicy
	// Ordering enables ordered processing per key (ordering.go). Default: off.
	Ordering OrderingConfig
}

// MergeRule says how a task merges into a waiting task with its merge_key.
type MergeRule string

const (
	MergeReplace MergeRule = "replace" // newest payload wins
	MergeAppend  MergeRule = "append"  // payload becomes the list of merged payloads
)

// KindConfig is the policy of one kind; it overrides its queue's.
type KindConfig struct {
	// MaxAttempts. Default: the queue's.
	MaxAttempts int
	// Retry policy. Default: the queue's.
	Retry *RetryPolicy
	// Timeout of one attempt. Default: the queue's.
	Timeout time.Duration
	// MergeRule for merge_key collisions. Default: replace.
	MergeRule MergeRule
	// Merge, when set, merges payloads in Go and wins over MergeRule.
	Merge func(existing json.RawMessage, mergeCount int, incoming json.RawMessage) (json.RawMessage, error)
}

// DefaultMaxFanOutBytes is Config.MaxFanOutBytes's default: 64 MiB.
const DefaultMaxFanOutBytes = 64 << 20

func (c *Config) withDefaults() *Config {
	out := *c
	out.Clock = cmp.Or[Clock](c.Clock, RealClock)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	out.InlinePayloadLimit = cmp.Or(c.InlinePayloadLimit, 64<<10)
	out.MaxPayloadSize = cmp.Or(c.MaxPayloadSize, 8<<20)
	out.MaxFanOutBytes = cmp.Or(c.MaxFanOutBytes, DefaultMaxFanOutBytes)
	out.MaxAttempts = cmp.Or(c.MaxAttempts, 25)
	out.Retention.Succeeded = cmp.Or(c.Retention.Succeeded, 24*time.Hour)
	out.Retention.Canceled = cmp.Or(c.Retention.Canceled, 24*time.Hour)
	out.Retention.DeadLetters = cmp.Or(c.Retention.DeadLetters, 30*24*time.Hour)
	out.Retention.Interval = cmp.Or(c.Retention.Interval, time.Minute)
	out.Retention.Events = cmp.Or(c.Retention.Events, 7*24*time.Hour)
	out.Retention.Runs = cmp.Or(c.Retention.Runs, 7*24*time.Hour)
	out.WorkerStaleAfter = cmp.Or(c.WorkerStaleAfter, time.Minute)
	out.RedriveHeartbeat = cmp.Or(c.RedriveHeartbeat, DefaultRedriveHeartbeat)
	b := filter.Budget{Cost: c.WhereCost, Time: c.WhereTime}.WithDefaults()
	out.WhereCost, out.WhereTime = b.Cost, b.Time
	out.StoreRetry = cmp.Or(c.StoreRetry, DefaultStoreRetry)
	if out.Retry == nil {
		p := bt.DefaultRetryPolicy
		out.Retry = &p
	}
	return &out
}

func (c *Config) validate() error {
	if c.InlinePayloadLimit < 0 {
		return fmt.Errorf("config: InlinePayloadLimit must not be negative")
	}
	if c.MaxPayloadSize < 0 {
		return fmt.Errorf("config: MaxPayloadSize must not be negative")
	}
	if c.MaxFanOutBytes < 0 {
		return fmt.Errorf("config: MaxFanOutBytes must not be negative")
	}
	if c.MaxAttempts < 0 || c.MaxAttempts > MaxAttemptsLimit {
		return fmt.Errorf("config: MaxAttempts must be between 0 (the default) and %d", MaxAttemptsLimit)
	}
	if c.Retention.Interval < 0 {
		return fmt.Errorf("config: Retention.Interval must not be negative")
	}
	if c.PurgeFloor < 0 {
		return fmt.Errorf("config: PurgeFloor must not be negative")
	}
	if c.RedriveHeartbeat < 0 {
		return fmt.Errorf("config: RedriveHeartbeat must not be negative")
	}
	if c.WhereTime < 0 {
		return fmt.Errorf("config: WhereTime must not be negative")
	}
	if c.Retry != nil {
		if err := c.Retry.Validate(); err != nil {
			return fmt.Errorf("config: Retry: %w", err)
		}
	}
	for name, q := range c.Queues {
		if err := ValidName(name); err != nil {
			return fmt.Errorf("config: queue %q: %w", name, err)
		}
		if q.Concurrency < 0 || q.MaxAttempts < 0 || q.Timeout < 0 {
			return fmt.Errorf("config: queue %q: concurrency, max attempts and timeout must not be negative", name)
		}
		if q.MaxAttempts > MaxAttemptsLimit {
			return fmt.Errorf("config: queue %q: max attempts must be at most %d", name, MaxAttemptsLimit)
		}
		if q.Retry != nil {
			if err := q.Retry.Validate(); err != nil {
				return fmt.Errorf("config: queue %q: retry: %w", name, err)
			}
		}
		if err := q.Complexity.validate(name); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if err := q.Ordering.validate(name); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	for name, k := range c.Kinds {
		if err := ValidName(name); err != nil {
			return fmt.Errorf("config: kind %q: %w", name, err)
		}
		if k.MaxAttempts < 0 || k.MaxAttempts > MaxAttemptsLimit {
			return fmt.Errorf("config: kind %q: max attempts must be between 0 (the default) and %d", name, MaxAttemptsLimit)
		}
		switch k.MergeRule {
		case "", MergeReplace, MergeAppend:
		default:
			return fmt.Errorf("config: kind %q: merge rule %q is not replace or append", name, k.MergeRule)
		}
		if k.Retry != nil {
			if err := k.Retry.Validate(); err != nil {
				return fmt.Errorf("config: kind %q: retry: %w", name, err)
			}
		}
	}
	return nil
}

// retryFor resolves the policy for a task: task, then kind, then queue, then
// the default.
func (c *Config) retryFor(t *Task) *RetryPolicy {
	if t.Retry != nil {
		return t.Retry
	}
	if k, ok := c.Kinds[t.Kind]; ok && k.Retry != nil {
		return k.Retry
	}
	if q, ok := c.Queues[t.Queue]; ok && q.Retry != nil {
		return q.Retry
	}
	return c.Retry
}

func (c *Config) maxAttemptsFor(queue, kind string) int {
	if k, ok := c.Kinds[kind]; ok && k.MaxAttempts > 0 {
		return k.MaxAttempts
	}
	if q, ok := c.Queues[queue]; ok && q.MaxAttempts > 0 {
		return q.MaxAttempts
	}
	return c.MaxAttempts
}

func (c *Config) timeoutFor(queue, kind string) time.Duration {
	if k, ok := c.Kinds[kind]; ok && k.Timeout > 0 {
		return k.Timeout
	}
	if q, ok := c.Queues[queue]; ok && q.Timeout > 0 {
		return q.Timeout
	}
	return 0
}

// merge implements the per-kind merge rule for the store.
func (c *Config) merge(kind string, existing json.RawMessage, count int, incoming json.RawMessage) (json.RawMessage, error) {
	k := c.Kinds[kind]
	if k.Merge != nil {
		out, err := k.Merge(existing, count, incoming)
		if err != nil {
			return nil, err
		}
		// A Go merge function's result is stored as the payload: it must be
		// JSON a strict client can read, like any payload handed in.
		if err := CheckJSON("payload", out); err != nil {
			return nil, fmt.Errorf("kind %q: merge function: %w", kind, err)
		}
		return out, nil
	}
	if k.MergeRule != MergeAppend {
		return incoming, nil
	}
	var list []json.RawMessage
	if count == 0 {
		list = []json.RawMessage{existing}
	} else if err := json.Unmarshal(existing, &list); err != nil {
		return nil, fmt.Errorf("append merge: existing payload is not a list: %w", err)
	}
	list = append(list, incoming)
	out, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	// incoming was checked; a waiting payload stored before the payload
	// rule must not be carried into a new one.
	if err := CheckJSON("payload", out); err != nil {
		return nil, fmt.Errorf("kind %q: append merge: %w", kind, err)
	}
	return out, nil
}

// DefaultRedriveHeartbeat is Config.RedriveHeartbeat's default.
const DefaultRedriveHeartbeat = 5 * time.Second

// DefaultStoreRetry is Config.StoreRetry's default.
const DefaultStoreRetry = time.Minute
