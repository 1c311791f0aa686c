package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	bt "github.com/backstophq/backstop/backstoptype"
)

// DLQ is what the dead-letter operations (replay, redrive, discard, resolve,
// purge, export) need from a store. Like the rest of the seam it applies the
// engine's decisions: which task may be replayed, how a patch changes its
// payload and what the history records are decided by the caller.
type DLQ interface {
	// Replay locks the task row (FOR UPDATE on Postgres; SQLite's writer
	// runs BEGIN IMMEDIATE) and calls plan with the current task, payload
	// loaded. A nil plan (and nil error) changes nothing and Replay returns
	// (nil, nil). An error from plan rolls back and is returned. Otherwise
	// the plan is applied and its events are written in the same
	// transaction; the result is the task that will run (the copy, with
	// Plan.NewID). Unknown id: ErrNotFound. A replay that would break a
	// uniqueness rule (idempotency key, merge key, an existing new id):
	// ErrConflict, nothing changed.
	Replay(ctx context.Context, id string, plan func(t *bt.Task) (*ReplayPlan, error)) (*bt.Task, error)
	// RedriveBatch replays, in one transaction, up to Limit open dead
	// letters matching the filter with ids after AfterID and last_seen at
	// or before Snapshot, in id order, with one set-based update; rows a
	// uniqueness rule refuses are skipped and reported. The redrive record
	// advances in the same transaction. The filter's where is in the SQL
	// subset (the client replays a Go-side where one by one, over List; a
	// where outside it selects nothing here).
	RedriveBatch(ctx context.Context, b RedriveBatch) (RedriveBatchResult, error)
	// CountRedrive counts what RedriveBatch would still select (any limit;
	// the client counts a Go-side where itself, over List).
	CountRedrive(ctx context.Context, b RedriveBatch) (int, error)
	// SetDLQStatus moves an open dead letter to Status (discarded,
	// resolved) and writes Event. Not an open dead letter: ErrNotFound.
	SetDLQStatus(ctx context.Context, c DLQStatusChange) (*bt.Task, error)
	// PurgeDLQ deletes dead letters whose status is one of Statuses and
	// whose record last changed before Before, with their executions,
	// spilled payloads and events. It returns how many tasks it deleted.
	PurgeDLQ(ctx context.Context, p PurgeParams) (int, error)

	// AppendEvents writes events in their own transaction (e.g. a refused
	// replay, whose own transaction rolled back).
	AppendEvents(ctx context.Context, events []bt.Event) error
	// Events lists a task's history in sequence order.
	Events(ctx context.Context, taskID string) ([]bt.Event, error)

	// StartRedrive returns the unfinished redrive with the same FilterKey
	// (resumed = true) or records r as a new one.
	StartRedrive(ctx context.Context, r Redrive) (rec Redrive, resumed bool, err error)
	// AdvanceRedrive moves a redrive's cursor and counts (per-row redrives).
	AdvanceRedrive(ctx context.Context, id, cursor string, replayed, failed int) error
	// FinishRedrive sets a redrive's final status.
	FinishRedrive(ctx context.Context, id, status string, at time.Time) error

	// RecordRedriveItem writes a per-row redrive's outcome for one item
	// that was not replayed (a replay's own transaction records a replayed
	// one: ReplayPlan.RedriveID), moves the cursor to it and adds failed to
	// the failed count, in one transaction.
	RecordRedriveItem(ctx context.Context, item RedriveItem, failed int) error
	// GetRedrive reads a redrive record. Unknown id: ErrNotFound.
	GetRedrive(ctx context.Context, id string) (Redrive, error)
	// Redrives lists redrive records, newest first, with ids before
	// Before when it is set.
	Redrives(ctx context.Context, before string, limit int) ([]Redrive, error)
	// RedriveItems lists a redrive's item outcomes in task id order, after
	// AfterID, only Outcomes when given.
	RedriveItems(ctx context.Context, q RedriveItemsQuery) ([]RedriveItem, error)
	// RedriveOutcomes counts a redrive's items by outcome.
	RedriveOutcomes(ctx context.Context, id string) (map[string]int, error)
	// SetRedriveStatus moves a redrive from one of from to status (running
	// clears finished_at; any other sets it to at). It reports whether the
	// record was in one of from. Unknown id: ErrNotFound.
	SetRedriveStatus(ctx context.Context, id string, from []string, status string, at time.Time) (bool, error)
	// ClaimRedrive records c.Runner as the redrive's runner with a
	// heartbeat at c.At, when the redrive has no runner, c.Runner already
	// runs it, its last heartbeat is before c.StaleBefore, or c.Force
	// (c.Renew: only when c.Runner runs it). It
	// reports whether it did and returns the record as it is after either
	// way (who runs it, last seen when). Unknown id: ErrNotFound.
	ClaimRedrive(ctx context.Context, c RedriveClaim) (Redrive, bool, error)
	// ReleaseRedrive clears the redrive's runner if it is runner (the
	// heartbeat time stays: when a runner was last seen).
	ReleaseRedrive(ctx context.Context, id, runner string) error
}

// RedriveClaim is a runner's claim on a redrive, and its heartbeat.
type RedriveClaim struct {
	ID, Runner  string
	At          time.Time
	StaleBefore time.Time
	Force       bool
	// Renew: a heartbeat of the current runner, never a claim.
	Renew bool
}

// Outcomes of a redrive's items.
const (
	OutcomeReplayed      = "replayed"
	OutcomeConflict      = "conflict"      // a uniqueness rule refused the replay
	OutcomeUnprocessable = "unprocessable" // the patch did not apply
	OutcomeNotOpen       = "not_open"      // no longer an open dead letter when its turn came
)

// RedriveItem is what became of one dead letter a redrive took up.
type RedriveItem struct {
	RedriveID string    `json:"redrive_id"`
	TaskID    string    `json:"task_id"`
	Outcome   string    `json:"outcome"`
	Detail    string    `json:"detail,omitempty"`
	At        time.Time `json:"at"`
}

// RedriveItemsQuery selects a redrive's items.
type RedriveItemsQuery struct {
	RedriveID string
	Outcomes  []string
	AfterID   string
	Limit     int
}

// ReplayPlan is the engine's decision about one dead letter.
type ReplayPlan struct {
	// NewID: copy the task under this id (replayed_from = the original,
	// which stays dead with dlq_status replayed). Empty: replay in place.
	NewID string
	// Payload replaces the payload when not nil (a patch).
	Payload     json.RawMessage
	InlineLimit int
	// State (pending or scheduled) and RunAt of the task that will run.
	State        bt.State
	RunAt        time.Time
	KeepAttempts bool
	Now          time.Time
	// Events are written in the same transaction.
	Events []bt.Event
	// RedriveID, when set, counts this replay in that redrive record and
	// moves its cursor to the task id, in the same transaction.
	RedriveID string
}

// RedriveBatch is one transaction of a bulk redrive without patch.
type RedriveBatch struct {
	RedriveID    string
	Filter       ListFilter // States and DLQStatuses are ignored: open dead letters
	Snapshot     time.Time
	AfterID      string
	Limit        int
	RunAt        time.Time
	State        bt.State
	KeepAttempts bool
	Now          time.Time
	Actor        string
	// Reason: the operator's, recorded in each event when not empty.
	Reason string
	// IDs, when not nil, narrows RedriveBatch to these ids (still open
	// dead letters matching Filter): the client lists and matches a page
	// of a where outside the SQL subset in Go, then replays it set-based
	// (Filter.Where is then empty). CountRedrive does not use it.
	IDs []string
	// Runner, when set with RedriveID, is the process running the
	// redrive. A store that reports the record (RedriveBatchResult.Record)
	// then replays nothing unless the record is running under this runner
	// when the batch starts (a cancel or a takeover committed before it
	// stops it); a store that does not report it ignores Runner, and the
	// runner reads the record after the batch.
	Runner string
}

// RedriveBatchResult reports one batch.
type RedriveBatchResult struct {
	Replayed int
	// Conflicts are ids refused by a uniqueness rule (left in the DLQ).
	Conflicts []string
	// LastID is the cursor after this batch; empty when nothing was left.
	LastID string
	// Steps are the replayed ids that may be workflow steps' tasks (they
	// hold a '.'): the engine resumes their runs.
	Steps []string
	// Record, when not nil, is the redrive record's runner and status as
	// the batch's own transaction left them (RedriveBatch.Runner set): the
	// runner decides whether to go on from it, without reading the record.
	Record *RedriveHolder
}

// RedriveHolder is who holds a redrive record and in what status.
type RedriveHolder struct {
	Runner string
	Status string
}

// DLQStatusChange discards or resolves a dead letter.
type DLQStatusChange struct {
	ID     string
	Status bt.DLQStatus
	Now    time.Time
	Event  bt.Event
}

// PurgeParams selects dead letters to delete.
type PurgeParams struct {
	Before   time.Time
	Statuses []bt.DLQStatus
	Limit    int // per transaction; default 1000
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// IDs, when not nil, narrows the purge to these ids (the library's
	// purge by a where condition names them a page at a time).
	IDs []string
	// Event, when set, is the purge's record: each batch that deletes
	// records appends the event Event returns for its count in the batch's
	// own transaction, so no deletion commits without its record.
	Event func(purged int) bt.Event
}

// Redrive is the durable record of a bulk redrive, so that a re-run after an
// interruption resumes it instead of starting over.
type Redrive struct {
	ID string `json:"id"`
	// Kind: JobRedrive (dead letters replayed) or a task action's job
	// (JobTaskCancel, …): one record, cursor and runner for every bulk job.
	Kind       string          `json:"kind"`
	FilterKey  string          `json:"-"`
	Filter     json.RawMessage `json:"filter"`
	Snapshot   time.Time       `json:"snapshot"`
	Cursor     string          `json:"cursor"`
	Replayed   int             `json:"replayed"`
	Failed     int             `json:"failed"`
	Status     string          `json:"status"` // running | done | canceled | interrupted
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	// Runner is the process running the redrive now ("" when none says so:
	// it stopped, or was never claimed); HeartbeatAt is when a runner last
	// recorded it was alive (ClaimRedrive).
	Runner      string     `json:"runner,omitempty"`
	HeartbeatAt *time.Time `json:"heartbeat_at,omitempty"`
}

// NewEvent makes an event with a fresh time-ordered id (drivers use it for
// the events they write in bulk).
func NewEvent(at time.Time, typ, subject, queue, kind, actor string, body json.RawMessage) bt.Event {
	return bt.Event{ID: uuid.Must(uuid.NewV7()).String(), Time: at, Type: typ, Subject: subject,
		Queue: queue, Kind: kind, Actor: actor, Body: body}
}

// StepIDs are the ids of rs that may be workflow steps' tasks (they hold a
// '.'), for RedriveBatchResult.Steps.
func StepIDs(rs []Redriven) []string {
	var out []string
	for _, r := range rs {
		if strings.IndexByte(r.ID, '.') >= 0 {
			out = append(out, r.ID)
		}
	}
	return out
}

// Redriven is one task a redrive batch moved back to its queue.
type Redriven struct {
	ID, Queue, Kind string
	ReplayCount     int
}

// RedriveEvents is the history a redrive batch writes, in the same
// transaction, whatever the driver: one dlq.replayed per task moved and one
// dlq.replay_failed per conflict.
func RedriveEvents(b RedriveBatch, done []Redriven, conflicts []string) []bt.Event {
	events := make([]bt.Event, 0, len(done)+len(conflicts))
	reason := ""
	if b.Reason != "" {
		r, _ := json.Marshal(b.Reason)
		reason = `,"reason":` + string(r)
	}
	for _, d := range done {
		body := fmt.Appendf(nil, `{"redrive_id":%q,"patched":false,"keep_attempts":%t,"replay_count":%d%s}`,
			b.RedriveID, b.KeepAttempts, d.ReplayCount, reason)
		events = append(events, NewEvent(b.Now, "dlq.replayed", d.ID, d.Queue, d.Kind, b.Actor, body))
	}
	for _, id := range conflicts {
		events = append(events, NewEvent(b.Now, "dlq.replay_failed", id, "", "", b.Actor,
			fmt.Appendf(nil, `{"redrive_id":%q,"error":"conflict"%s}`, b.RedriveID, reason)))
	}
	return events
}
