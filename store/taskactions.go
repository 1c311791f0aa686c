package store

import (
	"context"
	"encoding/json"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// TaskActions is what the operator's actions on live tasks need from a
// store: each batch is one transaction that changes each task its state
// allows, writes each one's event and item outcome, and advances the bulk
// job's record.
type TaskActions interface {
	// ApplyTaskAction applies b.Action to the tasks b.IDs, each row locked
	// (FOR UPDATE; SQLite's writer began IMMEDIATE) and judged by its state
	// now, not by the state it had when it was listed: a task that started
	// running meanwhile is cancel-requested (its worker stops it) or
	// skipped, never changed behind its worker's back. With b.JobID, every
	// id's outcome is recorded on that job and its cursor moves to the last
	// id, all in the same transaction.
	ApplyTaskAction(ctx context.Context, b TaskActionBatch) (TaskActionResult, error)
}

// Bulk job kinds (Redrive.Kind).
const (
	JobRedrive          = "redrive"
	JobTaskCancel       = "task.cancel"
	JobTaskRunNow       = "task.run_now"
	JobTaskDelete       = "task.delete"
	JobTaskReprioritize = "task.reprioritize"
)

// Outcomes of a task action's items (RedriveItem.Outcome).
const (
	OutcomeCanceled        = "canceled"
	OutcomeCancelRequested = "cancel_requested" // it was running: its worker stops it within a heartbeat
	OutcomeRunNow          = "run_now"
	OutcomeDeleted         = "deleted"
	OutcomeReprioritized   = "reprioritized"
	OutcomeSkipped         = "skipped" // its state did not allow the action (Detail says which)
)

// The history events of task actions (an operator's: actor, reason and
// the job id in the body).
const (
	EventTaskRunNow        = "task.run_now"
	EventTaskDeleted       = "task.deleted"
	EventTaskReprioritized = "task.reprioritized"
)

// ActionStates are the states a task action changes a task in; any
// other state skips it. Cancel also marks a running task (cancel
// requested).
var ActionStates = map[string][]bt.State{
	JobTaskCancel:       {bt.StateScheduled, bt.StatePending, bt.StateBuffered, bt.StateRunning},
	JobTaskRunNow:       {bt.StateScheduled, bt.StatePending},
	JobTaskDelete:       {bt.StateScheduled, bt.StatePending},
	JobTaskReprioritize: {bt.StateScheduled, bt.StatePending, bt.StateBuffered},
}

// TaskActionBatch is one transaction of a task action.
type TaskActionBatch struct {
	// Action is one of the task job kinds (JobTaskCancel, …).
	Action string
	IDs    []string
	// Priority: JobTaskReprioritize's new priority.
	Priority int
	Now      time.Time
	Actor    string
	// Reason: the operator's, in each event.
	Reason string
	// JobID: the bulk job's record; "" for none.
	JobID string
}

// TaskActionResult reports one batch.
type TaskActionResult struct {
	// Changed counts the tasks changed (cancel requested included);
	// Skipped the others. Items are every id's outcome, in b.IDs' order.
	Changed, Skipped int
	Items            []RedriveItem
	// Canceled are the tasks canceled (or cancel-requested) as they are
	// after: a workflow step's run learns of it.
	Canceled []*bt.Task
}

// TaskActionEvent is the history event of a task action on t (in state
// from before it); a cancel's is CancelEvent's type with the job's id.
func TaskActionEvent(b TaskActionBatch, t *bt.Task, from bt.State) bt.Event {
	body := map[string]any{"from": from}
	if b.Reason != "" {
		body["reason"] = b.Reason
	}
	if b.JobID != "" {
		body["job_id"] = b.JobID
	}
	var typ string
	switch b.Action {
	case JobTaskCancel:
		typ = EventCanceled
		if from == bt.StateRunning {
			typ = EventCancelRequest
		}
	case JobTaskRunNow:
		typ = EventTaskRunNow
	case JobTaskDelete:
		typ = EventTaskDeleted
	case JobTaskReprioritize:
		typ = EventTaskReprioritized
		body["priority"], body["from_priority"] = b.Priority, t.Priority
	}
	raw, _ := json.Marshal(body)
	e := NewEvent(b.Now, typ, t.ID, t.Queue, t.Kind, b.Actor, raw)
	e.Attributes = t.Attributes
	return e
}
