package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	bt "github.com/backstophq/backstop/backstoptype"
)

// EventLog is the read side of the event log (docs/events.md). Drivers write
// events in the same transaction as each state change; these methods read
// them by cursor, keep subscribers' checkpoints, and apply the retention
// horizon.
type EventLog interface {
	// ReadEvents returns up to q.Limit events of q.Stream after q.After, in
	// cursor order, from the final prefix of the log only: an event is
	// served once no transaction that could still commit an event before it
	// (in cursor order) is running. Page.Next is where the next read starts;
	// it moves past events the stream filtered out, so a reader of a quiet
	// stream does not rescan them.
	ReadEvents(ctx context.Context, q EventQuery) (EventPage, error)
	// EventsEnd returns the cursor of the end of the log's final prefix:
	// reading any stream after it serves only events that were not final
	// when it was taken ("" when no event is final yet: the beginning). One
	// indexed read, whatever the log's length.
	EventsEnd(ctx context.Context) (string, error)
	// EventCheckpoint returns a subscriber's saved cursor ("" if none).
	EventCheckpoint(ctx context.Context, name string) (string, error)
	// SaveEventCheckpoint stores a subscriber's cursor.
	SaveEventCheckpoint(ctx context.Context, name, cursor string, now time.Time) error
	// DeleteEventsBefore deletes, in one transaction, those of the oldest
	// limit events of the log (in cursor order) whose time is before
	// before, and returns how many it deleted; callers repeat while that is
	// limit (a younger event among the oldest ends the round).
	DeleteEventsBefore(ctx context.Context, before time.Time, limit int) (int, error)
}

// EventQuery selects events by stream and cursor.
type EventQuery struct {
	Stream Stream
	After  string // a cursor; "" is the beginning of the log
	Limit  int    // default 100, at most MaxEventLimit
}

// MaxEventLimit bounds one read.
const MaxEventLimit = 1000

// EventScanWindow bounds how many log entries one read of a filtered stream
// (type, queue, run, worker, node, execution) examines; a page may then hold fewer events
// than asked for while Next still moves on.
const EventScanWindow = 5000

// EventPage is one read. Its JSON is {items, next_cursor}, the shape of
// every list of the HTTP API; next_cursor is always there (a stream has no
// last page: a follower reads after it again later).
type EventPage struct {
	Events []bt.Event `json:"items"`
	// Next is the cursor to read after; equal to the query's After when
	// nothing new was final yet.
	Next string `json:"next_cursor"`
}

// StreamKind names a stream family.
type StreamKind string

// The streams of the log.
const (
	StreamAll    StreamKind = "all"
	StreamType   StreamKind = "type"
	StreamTask   StreamKind = "task"
	StreamQueue  StreamKind = "queue"
	StreamRun    StreamKind = "run"
	StreamWorker StreamKind = "worker"
	// StreamNode is node.<host>: the worker.* events of the workers on
	// that host and the events of every execution (attempt) one of them
	// ran (docs/events.md).
	StreamNode StreamKind = "node"
	// StreamExecution is execution.<id>: the events of one attempt (those
	// whose body's execution_id is the id).
	StreamExecution StreamKind = "execution"
	// StreamAudit is audit: the operators' actions, the events whose type
	// is one of AuditTypes and whose actor is not empty (docs/events.md,
	// "The audit stream"). It takes no value.
	StreamAudit StreamKind = "audit"
)

// AuditTypes are the event types of operator actions: each names its actor
// (who), its time, its target (the subject; the body's "target" when it has
// no subject of its own) and the operator's reason when one was given. The
// audit stream serves the ones with an actor (an engine transition of the
// same type, a run canceled by its own failure, has none).
var AuditTypes = []string{
	"dlq.replay_requested", "dlq.discarded", "dlq.resolved", "dlq.purged",
	EventCancelRequest, EventCanceled, "task.payload_viewed",
	"lease_key.rotated",
	EventQueuePaused, EventQueueResumed,
	EventLimitSet, EventLimitRemoved, EventFairSet, EventFairRemoved,
	EventTokenCreated, EventTokenRevoked,
	EventWorkflowApplied, "run.canceled", "run.resumed", "step.force_completed",
	EventTaskRunNow, EventTaskDeleted, EventTaskReprioritized,
	EventScheduleSaved, EventSchedulePaused, EventScheduleResumed, EventScheduleRemoved,
}

// The audit events written for operator actions that change no task.
const (
	EventQueuePaused     = "queue.paused"
	EventQueueResumed    = "queue.resumed"
	EventLimitSet        = "limit.set"
	EventLimitRemoved    = "limit.removed"
	EventFairSet         = "queue.fair_set"
	EventFairRemoved     = "queue.fair_removed"
	EventTokenCreated    = "token.created"
	EventTokenRevoked    = "token.revoked"
	EventWorkflowApplied = "workflow.applied"
)

// IsAuditType tells whether typ is one of AuditTypes.
func IsAuditType(typ string) bool { return slices.Contains(AuditTypes, typ) }

// AuditEvent builds the audit event of an operator action on target:
// subject and body's "target" both name it, "reason" is there when given,
// extra fields follow.
func AuditEvent(now time.Time, typ, target, actor, reason string, extra map[string]any) bt.Event {
	body := map[string]any{"target": target}
	for k, v := range extra {
		body[k] = v
	}
	if reason != "" {
		body["reason"] = reason
	}
	b, _ := json.Marshal(body)
	return NewEvent(now, typ, target, "", "", actor, b)
}

// Stream is a parsed stream name: all, type.<type>, task.<id>,
// queue.<name>, run.<run_id>, worker.<id>, node.<host>, execution.<id>.
type Stream struct {
	Kind  StreamKind
	Value string
}

func (s Stream) String() string {
	if s.Kind == StreamAll || s.Kind == "" {
		return string(StreamAll)
	}
	if s.Kind == StreamAudit {
		return string(StreamAudit)
	}
	return string(s.Kind) + "." + s.Value
}

// MaxStreamValue bounds the value part of a stream name.
const MaxStreamValue = 1024

// ErrBadStream and ErrBadCursor wrap the parse errors.
var (
	ErrBadStream = errors.New("invalid stream")
	ErrBadCursor = errors.New("invalid cursor")
)

// ParseStream validates a stream name. "" is "all".
func ParseStream(s string) (Stream, error) {
	if s == "" || s == string(StreamAll) {
		return Stream{Kind: StreamAll}, nil
	}
	if s == string(StreamAudit) {
		return Stream{Kind: StreamAudit}, nil
	}
	prefix, value, ok := strings.Cut(s, ".")
	if !ok {
		return Stream{}, fmt.Errorf("%w %q: want all, audit, type.<type>, task.<id>, queue.<name>, run.<run_id>, worker.<id>, node.<host> or execution.<id>", ErrBadStream, s)
	}
	k := StreamKind(prefix)
	switch k {
	case StreamType, StreamTask, StreamQueue, StreamRun, StreamWorker, StreamNode, StreamExecution:
	default:
		return Stream{}, fmt.Errorf("%w %q: unknown stream family %q (want type, task, queue, run, worker, node or execution)", ErrBadStream, s, prefix)
	}
	if value == "" {
		return Stream{}, fmt.Errorf("%w %q: %s needs a value after the dot", ErrBadStream, s, prefix)
	}
	if len(value) > MaxStreamValue {
		return Stream{}, fmt.Errorf("%w: %s value is %d bytes; at most %d", ErrBadStream, prefix, len(value), MaxStreamValue)
	}
	if !utf8.ValidString(value) {
		return Stream{}, fmt.Errorf("%w: %s value is not valid UTF-8", ErrBadStream, prefix)
	}
	for _, r := range value {
		if unicode.IsControl(r) {
			return Stream{}, fmt.Errorf("%w: %s value contains a control character", ErrBadStream, prefix)
		}
	}
	if k == StreamType {
		for _, r := range value {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.') {
				return Stream{}, fmt.Errorf("%w %q: an event type is lower-case letters, digits, '_' and '.'", ErrBadStream, s)
			}
		}
	}
	return Stream{Kind: k, Value: value}, nil
}

// Cursor is a position in the log: the writing transaction (Postgres; 0 on
// SQLite, whose single writer makes seq order commit order), the sequence
// number of the log row, and the event's place in that row (Postgres writes
// one row per statement and event type, docs/events.md; 0 on SQLite). Its
// text form is "<seq>" when Xid and Idx are 0, "<xid>-<seq>" when Idx is 0
// (a Postgres cursor from before event batches: after the whole row), else
// "<xid>-<seq>-<idx>"; "" is the beginning.
type Cursor struct {
	Xid, Seq, Idx uint64
}

func (c Cursor) String() string {
	if c.Idx != 0 {
		return strconv.FormatUint(c.Xid, 10) + "-" + strconv.FormatUint(c.Seq, 10) + "-" + strconv.FormatUint(c.Idx, 10)
	}
	if c.Xid == 0 {
		if c.Seq == 0 {
			return ""
		}
		return strconv.FormatUint(c.Seq, 10)
	}
	return strconv.FormatUint(c.Xid, 10) + "-" + strconv.FormatUint(c.Seq, 10)
}

// Less orders cursors as the log does.
func (c Cursor) Less(d Cursor) bool {
	if c.Xid != d.Xid {
		return c.Xid < d.Xid
	}
	if c.Seq != d.Seq {
		return c.Seq < d.Seq
	}
	return c.Idx < d.Idx
}

// MaxCursorPart bounds each number (all fit a signed 64-bit column).
const MaxCursorPart = 1<<63 - 1

// ParseCursor reads a cursor's text form.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	parts := strings.Split(s, "-")
	if len(parts) > 3 {
		return Cursor{}, fmt.Errorf("%w %q: want <seq>, <xid>-<seq> or <xid>-<seq>-<idx>, decimal numbers", ErrBadCursor, s)
	}
	var v [3]uint64
	for i, p := range parts {
		if p == "" || len(p) > 19 || strings.TrimLeft(p, "0123456789") != "" {
			return Cursor{}, fmt.Errorf("%w %q: want <seq>, <xid>-<seq> or <xid>-<seq>-<idx>, decimal numbers", ErrBadCursor, s)
		}
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil || n > MaxCursorPart {
			return Cursor{}, fmt.Errorf("%w %q: number out of range", ErrBadCursor, s)
		}
		v[i] = n
	}
	switch len(parts) {
	case 1:
		return Cursor{Seq: v[0]}, nil
	case 2:
		return Cursor{Xid: v[0], Seq: v[1]}, nil
	}
	return Cursor{Xid: v[0], Seq: v[1], Idx: v[2]}, nil
}

// actorKey carries the actor of an operation through a context.
type actorKey struct{}

// WithActor returns a context naming who acts (recorded on the events of
// enqueues and cancels).
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the context's actor, or def.
func ActorFrom(ctx context.Context, def string) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return def
}

type reasonKey struct{}

// WithReason returns ctx carrying the operator's reason for an operation
// whose store method has no parameter for it (a cancel); the driver records
// it in the operation's event body.
func WithReason(ctx context.Context, reason string) context.Context {
	return context.WithValue(ctx, reasonKey{}, reason)
}

// ReasonFrom returns the context's operator reason, or "".
func ReasonFrom(ctx context.Context) string {
	r, _ := ctx.Value(reasonKey{}).(string)
	return r
}

// DefaultActor is the actor of operations whose context names none.
const DefaultActor = "library"

// Event types written by the drivers with each state change.
const (
	EventEnqueued       = "task.enqueued"
	EventClaimed        = "task.claimed"
	EventStarted        = "task.started"
	EventProgress       = "task.progress"
	EventSucceeded      = "task.succeeded"
	EventFailed         = "task.failed"
	EventRetryScheduled = "task.retry_scheduled"
	EventDeadLettered   = "task.dead_lettered"
	EventLeaseExpired   = "task.lease_expired"
	EventCanceled       = "task.canceled"
	EventCancelRequest  = "task.cancel_requested"
	EventSnoozed        = "task.snoozed"
	EventReleased       = "task.released"
)

// MaxEventError bounds the error message a task.failed event carries.
const MaxEventError = 200

// TruncateError cuts an error message to MaxEventError characters, marking
// the cut (Postgres's left(error, 200) || '…' does the same).
func TruncateError(s string) string {
	if utf8.RuneCountInString(s) <= MaxEventError {
		return s
	}
	r := []rune(s)
	return string(r[:MaxEventError]) + "…"
}

// EventTime formats a time in event bodies (UTC, microseconds), the same in
// every driver.
func EventTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000Z")
}

// SettledTask is what a driver knows about a task a settlement applied to,
// after the update.
type SettledTask struct {
	ID, Queue, Kind string
	Attributes      map[string]string
	State           bt.State // the state the task is now in
	Attempt         int      // the attempt that was settled
	WorkerID        string
	StartedAt       time.Time // the attempt's start (attempted_at)
	RunAt           time.Time
	DeadCount       int
}

// SettleEvents is the events of one applied settlement, in order. Drivers
// that build events in Go (SQLite) call it; the Postgres driver computes the
// same in SQL (the conformance suite holds them to the same sequences):
//
//   - an attempt that ran (any outcome but lease_expired): task.started at
//     the attempt's start time;
//   - the attempt's outcome: task.succeeded, task.lease_expired,
//     task.snoozed, task.released, or task.failed (any failure, timeout
//     included; a canceled attempt has none, its task.canceled follows);
//   - the task's new state: task.dead_lettered, task.canceled, or
//     task.retry_scheduled when a charged attempt sends it back to wait.
func SettleEvents(s Settlement, t SettledTask) []bt.Event {
	at := s.FinishedAt
	mk := func(typ string, when time.Time, body string) bt.Event {
		e := NewEvent(when, typ, t.ID, t.Queue, t.Kind, "", json.RawMessage(body))
		e.Attributes = t.Attributes
		return e
	}
	var out []bt.Event
	exec := s.ExecutionID
	if exec != "" {
		if s.Outcome != bt.OutcomeLeaseExpired {
			out = append(out, mk(EventStarted, t.StartedAt, fmt.Sprintf(`{"execution_id":%q,"attempt":%d,"worker_id":%q}`,
				exec, t.Attempt, t.WorkerID)))
		}
		switch s.Outcome {
		case bt.OutcomeSucceeded:
			out = append(out, mk(EventSucceeded, at, fmt.Sprintf(`{"execution_id":%q,"attempt":%d,"duration_ms":%d}`,
				exec, t.Attempt, at.Sub(t.StartedAt).Milliseconds())))
		case bt.OutcomeLeaseExpired:
			out = append(out, mk(EventLeaseExpired, at, fmt.Sprintf(`{"execution_id":%q,"attempt":%d,"worker_id":%q}`,
				exec, t.Attempt, t.WorkerID)))
		case bt.OutcomeSnoozed, bt.OutcomeReleased:
			typ := EventSnoozed
			if s.Outcome == bt.OutcomeReleased {
				typ = EventReleased
			}
			out = append(out, mk(typ, at, fmt.Sprintf(`{"execution_id":%q,"attempt":%d,"run_at":%q}`,
				exec, t.Attempt, EventTime(t.RunAt))))
		case bt.OutcomeCanceled:
		default:
			b, _ := json.Marshal(map[string]any{"execution_id": exec, "attempt": t.Attempt,
				"outcome": string(s.Outcome), "error": TruncateError(s.Error)})
			out = append(out, mk(EventFailed, at, string(b)))
		}
	}
	switch {
	case t.State == bt.StateDead:
		out = append(out, mk(EventDeadLettered, at, fmt.Sprintf(`{"reason":%q,"attempt":%d,"dead_count":%d}`,
			s.DeadReason, t.Attempt, t.DeadCount)))
	case t.State == bt.StateCanceled:
		out = append(out, mk(EventCanceled, at, fmt.Sprintf(`{"execution_id":%q}`, exec)))
	case (t.State == bt.StateScheduled || t.State == bt.StatePending) && exec != "" && s.Outcome.Charged():
		out = append(out, mk(EventRetryScheduled, at, fmt.Sprintf(`{"attempt":%d,"run_at":%q,"delay_ms":%d}`,
			t.Attempt, EventTime(t.RunAt), t.RunAt.Sub(at).Milliseconds())))
	}
	return out
}

// EnqueuedEvent is the task.enqueued event of an inserted task.
func EnqueuedEvent(t *bt.Task, actor string) bt.Event {
	e := NewEvent(t.CreatedAt, EventEnqueued, t.ID, t.Queue, t.Kind, actor, fmt.Appendf(nil,
		`{"merged":false,"duplicate":false,"state":%q,"run_at":%q,"priority":%d,"max_attempts":%d}`,
		t.State, EventTime(t.RunAt), t.Priority, t.MaxAttempts))
	e.Attributes = t.Attributes
	return e
}

// FoldedEvent is the task.enqueued event of an enqueue that merged into, or
// was a duplicate of, the existing task (the event's subject).
func FoldedEvent(existing, incoming *bt.Task, merged bool, actor string) bt.Event {
	return foldedEvent(existing, incoming, merged, "", actor)
}

// DebouncedEvent is the task.enqueued event of a debounced enqueue that
// merged into the waiting task (the event's subject) and moved its run
// time: state and run_at are the task's after the move.
func DebouncedEvent(existing, incoming *bt.Task, actor string) bt.Event {
	return foldedEvent(existing, incoming, true, `"debounced":true,`, actor)
}

func foldedEvent(existing, incoming *bt.Task, merged bool, extra, actor string) bt.Event {
	e := NewEvent(incoming.UpdatedAt, EventEnqueued, existing.ID, existing.Queue, existing.Kind, actor, fmt.Appendf(nil,
		`{"merged":%t,"duplicate":%t,%s"state":%q,"run_at":%q,"incoming_id":%q,"merge_count":%d}`,
		merged, !merged, extra, existing.State, EventTime(existing.RunAt), incoming.ID, existing.MergeCount))
	e.Attributes = existing.Attributes
	return e
}

// ProgressEvent is the task.progress event of a heartbeat that changed it.
func ProgressEvent(t *bt.Task, execID string, p bt.Progress, now time.Time) bt.Event {
	e := NewEvent(now, EventProgress, t.ID, t.Queue, t.Kind, "", fmt.Appendf(nil,
		`{"execution_id":%q,"total":%d,"completed":%d}`, execID, p.Total, p.Completed))
	e.Attributes = t.Attributes
	return e
}

// CancelEvent is the event of an operator's cancel: task.canceled for a
// waiting task (canceled at once), task.cancel_requested for a running one.
// A non-empty reason (the operator's) is recorded in the body.
func CancelEvent(t *bt.Task, from bt.State, now time.Time, actor, reason string) bt.Event {
	typ := EventCanceled
	if from == bt.StateRunning {
		typ = EventCancelRequest
	}
	body := fmt.Appendf(nil, `{"from":%q}`, from)
	if reason != "" {
		body, _ = json.Marshal(map[string]string{"from": string(from), "reason": reason})
	}
	e := NewEvent(now, typ, t.ID, t.Queue, t.Kind, actor, body)
	e.Attributes = t.Attributes
	return e
}
