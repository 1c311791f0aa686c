package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// EnqueueParams describes one task to enqueue. Queue and Kind are required.
type EnqueueParams struct {
	// ID is the task id; default a new UUIDv7. Use your outbox or
	// correlation id to make the task addressable from your own records.
	ID    string
	Queue string
	Kind  string
	// Payload: JSON, default {}; valid UTF-8 holding nothing PostgreSQL's
	// jsonb cannot (a \u0000 or lone surrogate escape, a number outside
	// numeric), on every store, else a ValidationError naming its path.
	Payload json.RawMessage
	// Priority: higher runs first. Default 0.
	Priority int
	// RunAt or Delay postpone the first attempt (not both).
	RunAt time.Time
	Delay time.Duration
	// MaxAttempts. Default: kind, queue, then client configuration.
	MaxAttempts int
	// Timeout of each attempt. Default: kind, then queue configuration.
	Timeout time.Duration
	// Deadline bounds the task across all attempts; past it the task dies
	// with reason "expired".
	Deadline time.Time
	// Retry overrides the retry policy for this task.
	Retry *RetryPolicy
	// Attributes are carried on every signal about the task.
	Attributes map[string]string
	// IdempotencyKey: while a live task has this key, enqueueing again
	// returns that task instead (Duplicate).
	IdempotencyKey string
	// UniqueFor gives the idempotency key a window (unique per period): for
	// this long after this task's enqueue, enqueueing the key again returns
	// this task whatever its state (done, dead, canceled too); past it a
	// new task is made with the key, even while this one still waits or
	// runs. Zero: the key holds while the task is live. Needs
	// IdempotencyKey.
	UniqueFor time.Duration
	// MergeKey: while a task of this kind with this key is waiting, the new
	// payload merges into it (Merged) by the kind's merge rule.
	MergeKey string
	// Debounce delays the task until its key is quiet: the key is the
	// task's merge key, and each enqueue merges into the waiting task
	// (by the kind's merge rule) and moves it (debounce.go).
	Debounce   *Debounce
	Progress   Progress
	Complexity float64
	// TraceParent is the W3C traceparent of the producer's span.
	TraceParent string
	// Trace forces the task's trace to be sampled whatever the sampling
	// ratio: its send span carries backstop.trace=true (the binary's
	// sampler keeps it), and its attempts are children of it.
	Trace bool
	// OrderingKey and Sequence: on a queue with ordering enabled, tasks of
	// one key run one at a time in sequence order (ordering.go).
	OrderingKey string
	Sequence    int64
}

// EnqueueResult is what happened to one enqueued task.
type EnqueueResult struct {
	Task *Task `json:"task"`
	// Merged: the payload merged into a waiting task (returned).
	Merged bool `json:"merged"`
	// Duplicate: a live task with the same idempotency key exists (returned).
	Duplicate bool `json:"duplicate"`
}

// nameRE and attrKeyRE match what their patterns say (names_test.go
// holds the regular expressions and checks the two agree); they run on
// every enqueued task, where the regexp engine cost more than the rest of
// the validation.
var (
	nameRE    = asciiPattern("A-Za-z0-9", "A-Za-z0-9_.:-", 128) // ^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$
	attrKeyRE = asciiPattern("A-Za-z_", "A-Za-z0-9_.-", 64)     // ^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$
)

// ValidProgress is the one rule for reported progress (enqueue and the
// remote worker protocol); nil means "unchanged".
func ValidProgress(p *Progress) error {
	if p == nil {
		return nil
	}
	if p.Total < 0 || p.Completed < 0 {
		return Invalid("progress", "steps must not be negative")
	}
	if p.Total > 0 && p.Completed > p.Total {
		return Invalid("progress", "completed steps (%d) exceed total steps (%d)", p.Completed, p.Total)
	}
	return nil
}

// ValidName checks a name (queue, kind, task id, worker id): 1 to 128 of
// letters, digits, '_', '.', ':' and '-', starting with a letter or digit.
func ValidName(s string) error {
	if !nameRE.MatchString(s) {
		return fmt.Errorf("%q must be 1-128 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit", s)
	}
	return nil
}

// ValidID reports whether s is acceptable as a task id.
func ValidID(s string) error { return ValidName(s) }

// MaxAttemptsLimit bounds max_attempts wherever it is set (task, kind,
// queue, client): a million attempts is years of retries at any sane
// backoff, and a larger number is a typo, not a policy.
const MaxAttemptsLimit = 1_000_000

// CheckTime refuses a time a producer gives (run_at, deadline, a replay's
// run_at) outside the years 1970-9999: the zero time or year 1 is a
// mistake, never "now" (leave the time out to mean now).
func CheckTime(field string, t time.Time) error {
	if y := t.UTC().Year(); y < 1970 || y > 9999 {
		return Invalid(field, "%s is outside the years 1970-9999 (leave it out to mean now)", t.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// CheckText refuses a string that is not valid UTF-8 (JSON text must be,
// and a task's fields are served back as JSON) or holds a NUL byte
// (Postgres text and jsonb cannot store one: it would fail there and pass
// on SQLite).
func CheckText(field, s string) error {
	if !utf8.ValidString(s) {
		return Invalid(field, "is not valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return Invalid(field, "must not contain a NUL character")
	}
	return nil
}

// CheckJSON is the one rule for a JSON document a caller hands in (a
// payload, a run's input, a result, a merge patch, a patch value): valid
// JSON, valid UTF-8, and nothing PostgreSQL's jsonb cannot hold (jsonb.go),
// on every store. encoding/json's Valid accepts invalid UTF-8 inside
// strings, and stored as is it would be served back as raw bytes no strict
// client can read. The message names the value's path under field.
func CheckJSON(field string, b []byte) error {
	return checkJSONAt(field, field, b)
}

// checkJSONAt is CheckJSON with the paths in messages rooted at root (a
// patch's value: the path it sets).
func checkJSONAt(field, root string, b []byte) error {
	if !utf8.Valid(b) {
		return Invalid(field, "is not valid UTF-8 (JSON text must be UTF-8)")
	}
	if !json.Valid(b) {
		return Invalid(field, "is not valid JSON")
	}
	if why := JSONBProblem(root, b); why != "" {
		return Invalid(field, "%s", why)
	}
	return nil
}

const (
	maxAttrs        = 64
	maxAttrValueLen = 1024
	maxKeyLen       = 255
)

// ValidateAttributes checks attribute keys and values.
func ValidateAttributes(attrs map[string]string) error {
	if len(attrs) > maxAttrs {
		return Invalid("attributes", "%d attributes; at most %d are allowed", len(attrs), maxAttrs)
	}
	for k, v := range attrs {
		if !attrKeyRE.MatchString(k) {
			return Invalid("attributes", "key %q must be 1-64 characters of letters, digits, '_', '.' or '-', starting with a letter or '_'", k)
		}
		if len(v) > maxAttrValueLen {
			return Invalid("attributes", "value of %q is %d bytes; at most %d are allowed", k, len(v), maxAttrValueLen)
		}
		if !utf8.ValidString(v) {
			return Invalid("attributes", "value of %q is not valid UTF-8", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Invalid("attributes", "value of %q must not contain a NUL character", k)
		}
	}
	return nil
}

// Prepare validates p and turns it into a task row. Nothing is written.
func (e *Engine) Prepare(p *EnqueueParams, now time.Time) (*Task, error) {
	cfg := e.cfg
	if p.Queue == "" {
		return nil, Invalid("queue", "is required")
	}
	if err := ValidName(p.Queue); err != nil {
		return nil, Invalid("queue", "%v", err)
	}
	if cfg.StrictQueues {
		if _, ok := cfg.Queues[p.Queue]; !ok {
			return nil, Invalid("queue", "unknown queue %q (strict queues: declare it in the configuration)", p.Queue)
		}
	}
	if p.Kind == "" {
		return nil, Invalid("kind", "is required")
	}
	if err := ValidName(p.Kind); err != nil {
		return nil, Invalid("kind", "%v", err)
	}
	id := p.ID
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		id = u.String()
	} else if err := ValidName(id); err != nil {
		return nil, Invalid("id", "%v", err)
	}
	payload := p.Payload
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage(`{}`)
	}
	if len(payload) > cfg.MaxPayloadSize {
		return nil, &ValidationError{Field: "payload", TooLarge: true,
			Message: fmt.Sprintf("is %d bytes; the maximum is %d", len(payload), cfg.MaxPayloadSize)}
	}
	if err := CheckJSON("payload", payload); err != nil {
		return nil, err
	}
	if p.MaxAttempts < 0 || p.MaxAttempts > MaxAttemptsLimit {
		return nil, Invalid("max_attempts", "must be between 0 (the default) and %d (got %d)", MaxAttemptsLimit, p.MaxAttempts)
	}
	if p.Priority < math.MinInt16 || p.Priority > math.MaxInt16 {
		return nil, Invalid("priority", "must be between %d and %d", math.MinInt16, math.MaxInt16)
	}
	if p.Timeout < 0 {
		return nil, Invalid("timeout", "must not be negative")
	}
	if p.Delay < 0 {
		return nil, Invalid("delay", "must not be negative")
	}
	if p.Delay > 0 && !p.RunAt.IsZero() {
		return nil, Invalid("run_at", "give run_at or delay, not both")
	}
	if !p.RunAt.IsZero() {
		if err := CheckTime("run_at", p.RunAt); err != nil {
			return nil, err
		}
	}
	if !p.Deadline.IsZero() {
		if err := CheckTime("deadline", p.Deadline); err != nil {
			return nil, err
		}
	}
	if p.Retry != nil {
		if err := p.Retry.Validate(); err != nil {
			return nil, Invalid("retry", "%v", err)
		}
	}
	if err := ValidateAttributes(p.Attributes); err != nil {
		return nil, err
	}
	if _, ok := p.Attributes[TooComplexAttribute]; ok {
		return nil, Invalid("attributes", "%q is set by the queue's complexity policy, not by producers", TooComplexAttribute)
	}
	if len(p.IdempotencyKey) > maxKeyLen {
		return nil, Invalid("idempotency_key", "is longer than %d bytes", maxKeyLen)
	}
	if p.UniqueFor < 0 {
		return nil, Invalid("unique_for", "must be positive (got %s)", p.UniqueFor)
	}
	if p.UniqueFor > 0 && p.IdempotencyKey == "" {
		return nil, Invalid("unique_for", "needs an idempotency key: the window is the key's")
	}
	if len(p.MergeKey) > maxKeyLen {
		return nil, Invalid("merge_key", "is longer than %d bytes", maxKeyLen)
	}
	mergeKey, err := p.Debounce.check(p)
	if err != nil {
		return nil, err
	}
	for _, f := range [...]struct{ field, s string }{{"idempotency_key", p.IdempotencyKey},
		{"merge_key", p.MergeKey}, {"ordering_key", p.OrderingKey}, {"trace_parent", p.TraceParent}} {
		if err := CheckText(f.field, f.s); err != nil {
			return nil, err
		}
	}
	if err := ValidProgress(&p.Progress); err != nil {
		return nil, err
	}
	if p.Complexity < 0 || math.IsNaN(p.Complexity) || math.IsInf(p.Complexity, 0) {
		return nil, Invalid("complexity", "must be a finite number, not negative")
	}
	runAt := now
	if !p.RunAt.IsZero() {
		runAt = p.RunAt.UTC().Truncate(time.Microsecond)
	} else if p.Delay > 0 {
		runAt = now.Add(p.Delay)
	} else if p.Debounce != nil {
		runAt = now.Add(p.Debounce.For)
	}
	var deadline *time.Time
	if !p.Deadline.IsZero() {
		d := p.Deadline.UTC().Truncate(time.Microsecond)
		if !d.After(now) {
			return nil, Invalid("deadline", "%s is not in the future", d.Format(time.RFC3339))
		}
		deadline = &d
	}
	var uniqueUntil *time.Time
	if p.UniqueFor > 0 {
		u := now.Add(p.UniqueFor).Truncate(time.Microsecond)
		if u.Year() > 9999 {
			return nil, Invalid("unique_for", "%s is too long: the window would end after the year 9999", p.UniqueFor)
		}
		uniqueUntil = &u
	}
	// The queue's complexity policy may route the task elsewhere; the
	// queue it lands on gives the defaults.
	tooComplex, queue := cfg.tooComplex(p.Queue, p.Complexity, len(payload))
	maxAttempts := p.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = cfg.maxAttemptsFor(queue, p.Kind)
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = cfg.timeoutFor(queue, p.Kind)
	}
	state := bt.StatePending
	if runAt.After(now) {
		state = bt.StateScheduled
	}
	state, unordered, err := e.orderingPrepare(p, queue, state)
	if err != nil {
		return nil, err
	}
	key, seq := p.OrderingKey, p.Sequence
	attrs := p.Attributes
	if len(attrs) > 0 || tooComplex || unordered {
		attrs = make(map[string]string, len(p.Attributes)+1)
		for k, v := range p.Attributes {
			attrs[k] = v
		}
	}
	if tooComplex {
		attrs[TooComplexAttribute] = "true"
	}
	if unordered {
		attrs[OrderingRolloutAttribute] = "out"
		key, seq = "", 0
	}
	return &Task{
		ID:             id,
		Queue:          queue,
		Kind:           p.Kind,
		State:          state,
		MaxAttempts:    maxAttempts,
		Payload:        payload,
		Attributes:     attrs,
		Priority:       p.Priority,
		RunAt:          runAt,
		CreatedAt:      now,
		UpdatedAt:      now,
		Progress:       p.Progress,
		Timeout:        bt.Duration(timeout.Truncate(time.Microsecond)),
		Deadline:       deadline,
		Retry:          p.Retry,
		IdempotencyKey: p.IdempotencyKey,
		UniqueUntil:    uniqueUntil,
		MergeKey:       mergeKey,
		Complexity:     p.Complexity,
		TraceParent:    p.TraceParent,
		PayloadSize:    len(payload),
		OrderingKey:    key,
		Sequence:       seq,
	}, nil
}

// EnqueueOpts are the store options of an enqueue of params as tasks.
func (e *Engine) EnqueueOpts(ctx context.Context, params []EnqueueParams, tasks []*Task) store.EnqueueOpts {
	return store.EnqueueOpts{InlineLimit: e.cfg.InlinePayloadLimit, Merge: e.cfg.merge,
		Events: e.tooComplexEvents(ctx, params, tasks), Debounce: debounceOpts(params)}
}

// PrepareAll prepares a batch (Prepare), or says which task of it was
// refused (*BatchError).
func (e *Engine) PrepareAll(params []EnqueueParams) ([]*Task, error) {
	now := e.cfg.Clock.Now()
	tasks := make([]*Task, len(params))
	for i := range params {
		t, err := e.Prepare(&params[i], now)
		if err != nil {
			if len(params) > 1 {
				return nil, &BatchError{Index: i, Err: err}
			}
			return nil, err
		}
		tasks[i] = t
	}
	return tasks, nil
}

// BatchError says which task of a batch was refused; nothing was written.
type BatchError struct {
	Index int // 0-based position in the batch
	Err   error
	// Of names what the batch holds: "" (tasks) or "run" (a batch start).
	Of string
}

func (e *BatchError) Error() string {
	of := e.Of
	if of == "" {
		of = "task"
	}
	return fmt.Sprintf("%s %d of the batch: %v", of, e.Index+1, e.Err)
}
func (e *BatchError) Unwrap() error { return e.Err }

// RunAttribute is the attribute that groups tasks into a run (a batch of
// tasks, or a workflow run's steps).
const RunAttribute = "run_id"

// ValidAttrKey reports whether k is acceptable as an attribute key.
func ValidAttrKey(k string) bool { return attrKeyRE.MatchString(k) }
