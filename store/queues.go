package store

import (
	"context"
	"time"
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
	// PauseQueue pauses the queue. Pausing a paused queue changes nothing
	// and returns the first pause (changed = false).
	PauseQueue(ctx context.Context, name, actor string, now time.Time) (st QueueState, changed bool, err error)
	// ResumeQueue lets the queue be claimed again; changed is false when it
	// was not paused.
	ResumeQueue(ctx context.Context, name string) (changed bool, err error)
	// PausedQueues lists the paused queues by name.
	PausedQueues(ctx context.Context) ([]QueueState, error)
}
