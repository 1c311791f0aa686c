package store

import (
	"context"
	"encoding/json"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// Schedule is a periodic task as stored: its timing (Every, or Cron in
// TZ), its missed-tick policy, the task each tick enqueues, and where it
// stands. The timing's rules are internal/schedule's; the store keeps them.
type Schedule struct {
	Name   string        `json:"name"`
	Every  time.Duration `json:"-"`
	Cron   string        `json:"cron,omitempty"`
	TZ     string        `json:"tz,omitempty"`
	Missed string        `json:"missed"`
	Task   ScheduleTask  `json:"task"`
	Paused bool          `json:"paused"`
	// NextRunAt is the next tick not yet enqueued nor skipped.
	NextRunAt time.Time `json:"next_run_at"`
	// LastRunAt is the last tick handled (enqueued or skipped), with its
	// outcome ("enqueued", "skipped") and the task it enqueued.
	LastRunAt   *time.Time `json:"last_run_at"`
	LastOutcome string     `json:"last_outcome"`
	LastTaskID  string     `json:"last_task_id,omitempty"`
	// LastEnqueuedAt is the last tick that enqueued a task.
	LastEnqueuedAt *time.Time `json:"last_enqueued_at"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

// ScheduleTask is the task a schedule's tick enqueues.
type ScheduleTask struct {
	Queue       string            `json:"queue"`
	Kind        string            `json:"kind"`
	Payload     json.RawMessage   `json:"payload,omitempty"`
	Attributes  map[string]string `json:"attributes,omitempty"`
	Priority    int               `json:"priority,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
}

// The schedule outcomes (Schedule.LastOutcome) and events.
const (
	ScheduleEnqueued = "enqueued"
	ScheduleSkipped  = "skipped"

	EventScheduleTicked  = "schedule.ticked"
	EventScheduleSkipped = "schedule.skipped"
	EventScheduleSaved   = "schedule.saved"
	EventSchedulePaused  = "schedule.paused"
	EventScheduleResumed = "schedule.resumed"
	EventScheduleRemoved = "schedule.removed"
)

// Schedules stores periodic tasks (the scheduler is internal/maintenance's
// schedules service). Each write that takes an event (nil or an empty
// Type: none) appends it in the same transaction.
type Schedules interface {
	// PutSchedule inserts s; one with that name already there gives
	// ErrConflict, unless replace: then its definition is replaced, and
	// its next tick too when its timing changed (otherwise it keeps where
	// it stands, so a configuration loaded again moves nothing).
	PutSchedule(ctx context.Context, s Schedule, replace bool, ev bt.Event) error
	// GetSchedule reads one schedule; ErrNotFound if none.
	GetSchedule(ctx context.Context, name string) (*Schedule, error)
	// ListSchedules lists every schedule by name.
	ListSchedules(ctx context.Context) ([]Schedule, error)
	// PauseSchedule pauses (paused) or resumes a schedule; resuming sets
	// its next tick to next (the ticks of the pause are not run).
	// ErrNotFound if none.
	PauseSchedule(ctx context.Context, name string, paused bool, next time.Time, ev func(Schedule) bt.Event) (*Schedule, error)
	// DeleteSchedule removes a schedule; ErrNotFound if none.
	DeleteSchedule(ctx context.Context, name string, ev func(Schedule) bt.Event) error
	// DueSchedules lists up to limit schedules not paused whose next tick
	// is at or before now, earliest first.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error)
}

// ScheduleAdvance is one round of a schedule (ScheduleTx.AdvanceSchedule):
// it applies only while the schedule's next tick is still From and it is
// not paused, so that two leaders handling the same tick advance it once.
type ScheduleAdvance struct {
	Name     string
	From     time.Time // the next tick the round read
	Next     time.Time // the next tick after the round
	LastRun  time.Time // the newest tick the round handled
	Outcome  string    // of LastRun: ScheduleEnqueued or ScheduleSkipped
	TaskID   string    // the task LastRun enqueued
	Enqueued time.Time // the newest tick the round enqueued (zero: none)
	Now      time.Time
}

// ScheduleTx is a schedule's write inside a composed transaction.
type ScheduleTx interface {
	// AdvanceSchedule moves a schedule past the ticks of one round, and
	// says whether it did (false: another round, or a pause, got there
	// first; the caller rolls back what it wrote for those ticks).
	AdvanceSchedule(ctx context.Context, a ScheduleAdvance) (bool, error)
}
