package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/schedule"
	"github.com/backstophq/backstop/store"
)

// Schedules enqueues the periodic tasks whose ticks came
// (internal/schedule decides which due ticks enqueue and which are
// skipped). Each schedule's round is one transaction that advances the
// schedule's next tick only while it is still the tick the round read and
// enqueues the round's tasks: a tick enqueues exactly one task whichever
// leader, or how many, handle it. The task's idempotency key names the
// schedule and the tick (IdempotencyKey).
type Schedules struct {
	base
	e *engine.Engine
}

// NewSchedules makes the "schedules" service.
func NewSchedules(e *engine.Engine, every time.Duration) *Schedules {
	return &Schedules{base: base{"schedules", every}, e: e}
}

// IdempotencyKey is the key of the task a schedule's tick enqueues.
func IdempotencyKey(name string, tick time.Time) string {
	return "schedule:" + name + ":" + tick.UTC().Format(time.RFC3339)
}

// errRoundLost: another round advanced the schedule first.
var errRoundLost = errors.New("schedule advanced by another round")

// RunOnce handles the due schedules, a batch at a time, until none is due.
// A schedule that cannot be handled (its row no longer parses, its task is
// refused) is logged and left for the next round; the others go on.
func (s *Schedules) RunOnce(ctx context.Context) error {
	var firstErr error
	failed := map[string]bool{}
	for {
		now := s.e.Now()
		due, err := s.e.Store().DueSchedules(ctx, now, Batch)
		if err != nil {
			return err
		}
		n := 0
		for _, sc := range due {
			if failed[sc.Name] {
				continue
			}
			n++
			if err := s.tick(ctx, sc, now); err != nil {
				failed[sc.Name] = true
				if firstErr == nil {
					firstErr = err
				}
				s.e.Config().Logger.Warn("schedule round failed", "schedule", sc.Name, "error", err)
			}
		}
		if len(due) < Batch || n == 0 {
			return firstErr
		}
	}
}

// tick handles one due schedule at now.
func (s *Schedules) tick(ctx context.Context, sc store.Schedule, now time.Time) error {
	sch, err := schedule.Parse(schedule.Spec{Every: sc.Every, Cron: sc.Cron, TZ: sc.TZ})
	if err != nil {
		return fmt.Errorf("schedule %s: %w", sc.Name, err)
	}
	missed, err := schedule.ParseMissed(sc.Missed)
	if err != nil {
		return fmt.Errorf("schedule %s: %w", sc.Name, err)
	}
	plan := sch.Plan(sc.NextRunAt, now, missed)
	params := make([]engine.EnqueueParams, len(plan.Fire))
	for i, t := range plan.Fire {
		params[i] = engine.EnqueueParams{Queue: sc.Task.Queue, Kind: sc.Task.Kind, Payload: sc.Task.Payload,
			Attributes: sc.Task.Attributes, Priority: sc.Task.Priority, MaxAttempts: sc.Task.MaxAttempts,
			RunAt: t, IdempotencyKey: IdempotencyKey(sc.Name, t)}
	}
	tasks, err := s.e.PrepareAll(params)
	if err != nil {
		return fmt.Errorf("schedule %s: its task: %w", sc.Name, err)
	}
	adv := store.ScheduleAdvance{Name: sc.Name, From: sc.NextRunAt, Next: plan.Next, Now: now}
	if plan.Skipped > 0 {
		adv.LastRun, adv.Outcome = plan.LastSkipped, store.ScheduleSkipped
	}
	if n := len(plan.Fire); n > 0 && !plan.Fire[n-1].Before(adv.LastRun) {
		adv.LastRun, adv.Outcome, adv.Enqueued, adv.TaskID = plan.Fire[n-1], store.ScheduleEnqueued, plan.Fire[n-1], tasks[n-1].ID
	} else if n > 0 {
		adv.Enqueued, adv.TaskID = plan.Fire[n-1], tasks[n-1].ID
	}
	if adv.Outcome == "" { // nothing due after all
		return nil
	}
	actor := store.ActorFrom(ctx, store.DefaultActor)
	err = s.e.Store().InTx(ctx, func(tx store.Tx) error {
		ok, err := tx.AdvanceSchedule(ctx, adv)
		if err != nil {
			return err
		}
		if !ok {
			return errRoundLost
		}
		var evs []bt.Event
		for _, t := range plan.Skip {
			evs = append(evs, scheduleEvent(now, store.EventScheduleSkipped, sc, actor, map[string]any{"tick": t}))
		}
		if more := plan.Skipped - len(plan.Skip); more > 0 {
			evs = append(evs, scheduleEvent(now, store.EventScheduleSkipped, sc, actor,
				map[string]any{"count": more, "last_tick": plan.LastSkipped}))
		}
		if len(tasks) > 0 {
			rs, err := tx.Enqueue(ctx, tasks, s.e.EnqueueOpts(ctx, params, tasks))
			if err != nil {
				return err
			}
			for i, r := range rs {
				evs = append(evs, scheduleEvent(now, store.EventScheduleTicked, sc, actor,
					map[string]any{"tick": plan.Fire[i], "task_id": r.Task.ID, "duplicate": r.Duplicate}))
			}
		}
		return tx.AppendEvents(ctx, evs)
	})
	if errors.Is(err, errRoundLost) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("schedule %s: %w", sc.Name, err)
	}
	s.e.Telemetry.ScheduleTicks(ctx, sc.Name, store.ScheduleEnqueued, len(plan.Fire))
	s.e.Telemetry.ScheduleTicks(ctx, sc.Name, store.ScheduleSkipped, plan.Skipped)
	return nil
}

// scheduleEvent is an event of schedule sc: its subject is the schedule's
// name, its queue and kind the task's, its body names the schedule.
func scheduleEvent(now time.Time, typ string, sc store.Schedule, actor string, body map[string]any) bt.Event {
	body["schedule"] = sc.Name
	b, _ := json.Marshal(body)
	return store.NewEvent(now, typ, sc.Name, sc.Task.Queue, sc.Task.Kind, actor, b)
}
