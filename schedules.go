package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/schedule"
	"github.com/backstophq/backstop/store"
)

// ScheduleParams declares a periodic task: a name, a schedule (Every, or
// Cron with an optional TZ), what to do with ticks missed while no leader
// ran (Missed), and the task each tick enqueues. The elected maintenance
// leader enqueues it, exactly one task per tick (docs/api.md, "Periodic
// schedules").
type ScheduleParams struct {
	Name string `json:"name"`
	// Every is a fixed interval (whole seconds, at least 1s), ticking on
	// its multiples (every 1m at each minute).
	Every time.Duration `json:"-"`
	// Cron is a cron expression (five fields, or six with seconds first;
	// descriptors such as @hourly), read in TZ (an IANA zone; default UTC).
	Cron string `json:"cron,omitempty"`
	TZ   string `json:"tz,omitempty"`
	// Missed: "skip" (default), "once" or "all" (internal/schedule).
	Missed      string            `json:"missed,omitempty"`
	Queue       string            `json:"queue"`
	Kind        string            `json:"kind"`
	Payload     json.RawMessage   `json:"payload,omitempty"`
	Attributes  map[string]string `json:"attributes,omitempty"`
	Priority    int               `json:"priority,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	// Replace: a schedule of that name is replaced (keeping its next tick
	// when its timing is unchanged) instead of refused with ErrConflict.
	Replace bool `json:"replace,omitempty"`
}

// ScheduleInfo is a schedule as the CLI and the API show it.
type ScheduleInfo struct {
	Name string `json:"name"`
	// Schedule reads "every 1m0s" or "cron 0 9 * * * Europe/Paris".
	Schedule    string            `json:"schedule"`
	Every       string            `json:"every,omitempty"`
	Cron        string            `json:"cron,omitempty"`
	TZ          string            `json:"tz,omitempty"`
	Missed      string            `json:"missed"`
	Queue       string            `json:"queue"`
	Kind        string            `json:"kind"`
	Payload     json.RawMessage   `json:"payload,omitempty"`
	Attributes  map[string]string `json:"attributes,omitempty"`
	Priority    int               `json:"priority,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	Paused      bool              `json:"paused"`
	// NextRunAt is the next tick to be enqueued (or skipped).
	NextRunAt time.Time `json:"next_run_at"`
	// LastRunAt is the last tick handled; LastOutcome says whether it was
	// "enqueued" (LastTaskID) or "skipped"; "" before the first.
	LastRunAt      *time.Time `json:"last_run_at"`
	LastOutcome    string     `json:"last_outcome"`
	LastTaskID     string     `json:"last_task_id,omitempty"`
	LastEnqueuedAt *time.Time `json:"last_enqueued_at"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

func scheduleInfo(s *store.Schedule) ScheduleInfo {
	in := ScheduleInfo{Name: s.Name, Cron: s.Cron, TZ: s.TZ, Missed: s.Missed, Queue: s.Task.Queue, Kind: s.Task.Kind,
		Payload: s.Task.Payload, Attributes: s.Task.Attributes, Priority: s.Task.Priority, MaxAttempts: s.Task.MaxAttempts,
		Paused: s.Paused, NextRunAt: s.NextRunAt, LastRunAt: s.LastRunAt, LastOutcome: s.LastOutcome, LastTaskID: s.LastTaskID,
		LastEnqueuedAt: s.LastEnqueuedAt, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
	if s.Every > 0 {
		in.Every = s.Every.String()
	}
	if sch, err := schedule.Parse(schedule.Spec{Every: s.Every, Cron: s.Cron, TZ: s.TZ}); err == nil {
		in.Schedule = sch.String()
	}
	return in
}

// AddSchedule validates p and stores the schedule; its first tick is the
// next one after now. Bad input is a ValidationError naming the field
// (name, every, cron, tz, missed, or the task's: queue, kind, payload,
// attributes...), and nothing is written; a schedule of that name already
// there is ErrConflict unless p.Replace.
func (c *Client) AddSchedule(ctx context.Context, p ScheduleParams) (*ScheduleInfo, error) {
	if err := engine.ValidName(p.Name); err != nil {
		return nil, invalid("name", "%v", err)
	}
	sch, err := schedule.Parse(schedule.Spec{Every: p.Every, Cron: p.Cron, TZ: p.TZ})
	var fe *schedule.FieldError
	if errors.As(err, &fe) {
		return nil, invalid(fe.Field, "%s", fe.Msg)
	} else if err != nil {
		return nil, invalid("every", "%v", err)
	}
	missed, err := schedule.ParseMissed(p.Missed)
	if err != nil {
		return nil, invalid("missed", "%q is not one of skip, once, all", p.Missed)
	}
	task := store.ScheduleTask{Queue: p.Queue, Kind: p.Kind, Payload: p.Payload, Attributes: p.Attributes,
		Priority: p.Priority, MaxAttempts: p.MaxAttempts}
	prepared, err := c.e.PrepareAll([]EnqueueParams{{Queue: p.Queue, Kind: p.Kind, Payload: p.Payload,
		Attributes: p.Attributes, Priority: p.Priority, MaxAttempts: p.MaxAttempts}})
	if err != nil {
		return nil, err
	}
	task.Payload = prepared[0].Payload
	now := c.now()
	spec := sch.Spec()
	s := store.Schedule{Name: p.Name, Every: spec.Every, Cron: spec.Cron, TZ: spec.TZ, Missed: string(missed), Task: task,
		NextRunAt: sch.First(now), CreatedAt: now, UpdatedAt: now}
	in := scheduleInfo(&s)
	ev := c.auditEvent(ctx, store.EventScheduleSaved, p.Name, "", map[string]any{"schedule": in.Schedule,
		"queue": p.Queue, "kind": p.Kind, "missed": string(missed)})
	if err := c.store.PutSchedule(ctx, s, p.Replace, ev); err != nil {
		return nil, err
	}
	out, err := c.store.GetSchedule(ctx, p.Name)
	if err != nil {
		return nil, err
	}
	in = scheduleInfo(out)
	c.cfg.Logger.Info("schedule saved", slog.String("schedule", p.Name), slog.String("timing", in.Schedule))
	return &in, nil
}

// Schedule reads one schedule; ErrNotFound if none.
func (c *Client) Schedule(ctx context.Context, name string) (*ScheduleInfo, error) {
	s, err := c.store.GetSchedule(ctx, name)
	if err != nil {
		return nil, err
	}
	in := scheduleInfo(s)
	return &in, nil
}

// Schedules lists every schedule by name.
func (c *Client) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	ss, err := c.store.ListSchedules(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ScheduleInfo, len(ss))
	for i := range ss {
		out[i] = scheduleInfo(&ss[i])
	}
	return out, nil
}

// PauseSchedule stops a schedule's ticks until ResumeSchedule; pausing a
// paused schedule changes nothing. ErrNotFound if none.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*ScheduleInfo, error) {
	return c.pauseSchedule(ctx, name, true)
}

// ResumeSchedule lets a paused schedule tick again from its next tick
// after now: the ticks of the pause are not enqueued. ErrNotFound if none.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*ScheduleInfo, error) {
	return c.pauseSchedule(ctx, name, false)
}

func (c *Client) pauseSchedule(ctx context.Context, name string, paused bool) (*ScheduleInfo, error) {
	cur, err := c.store.GetSchedule(ctx, name)
	if err != nil {
		return nil, err
	}
	if cur.Paused == paused {
		in := scheduleInfo(cur)
		return &in, nil
	}
	next := cur.NextRunAt
	if !paused {
		sch, err := schedule.Parse(schedule.Spec{Every: cur.Every, Cron: cur.Cron, TZ: cur.TZ})
		if err != nil {
			return nil, err
		}
		next = sch.First(c.now())
	}
	typ := store.EventSchedulePaused
	if !paused {
		typ = store.EventScheduleResumed
	}
	s, err := c.store.PauseSchedule(ctx, name, paused, next, func(s store.Schedule) Event {
		return c.auditEvent(ctx, typ, s.Name, "", nil)
	})
	if err != nil {
		return nil, err
	}
	in := scheduleInfo(s)
	return &in, nil
}

// RemoveSchedule deletes a schedule (the tasks it enqueued stay).
// ErrNotFound if none.
func (c *Client) RemoveSchedule(ctx context.Context, name string) error {
	return c.store.DeleteSchedule(ctx, name, func(s store.Schedule) Event {
		return c.auditEvent(ctx, store.EventScheduleRemoved, s.Name, "", nil)
	})
}
