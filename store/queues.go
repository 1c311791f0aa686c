package store

import (
	"context"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// QueueState is a queue's operator state. Only paused queues have a row.
type QueueState struct {
	Name     string    `json:"name"`
	PausedAt time.Time `json:"paused_at"`
	PausedBy string    `json:"paused_by"`
}

// Queues stores which queues are paused. Claim skips a paused queue in
// the store itself, so in-process and remote workers both stop claiming
// from it (tasks already running finish as usual).
type Queues interface {
	// PauseQueue pauses the queue and, when that changed something,
	// appends ev (its audit event; none when ev.Type is empty) in the same
	// transaction. Pausing a paused queue changes nothing and returns the
	// first pause (changed = false).
	PauseQueue(ctx context.Context, name, actor string, now time.Time, ev bt.Event) (st QueueState, changed bool, err error)
	// ResumeQueue lets the queue be claimed again and, when it was paused,
	// appends ev in the same transaction; changed is false when it was not
	// paused.
	ResumeQueue(ctx context.Context, name string, ev bt.Event) (changed bool, err error)
	// PausedQueues lists the paused queues by name.
	PausedQueues(ctx context.Context) ([]QueueState, error)
}
