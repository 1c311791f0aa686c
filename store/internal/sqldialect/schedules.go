package sqldialect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is store.Schedules and store.ScheduleTx.

const scheduleColumns = `name, every_ms, cron, tz, missed, task, paused, next_run_at, last_run_at, last_outcome,
	last_task_id, last_enqueued_at, created_at, updated_at`

func scanSchedule(row Row) (*store.Schedule, error) {
	var s store.Schedule
	var everyMS int64
	var task string
	if err := row.Scan(&s.Name, &everyMS, &s.Cron, &s.TZ, &s.Missed, &task, &s.Paused, &s.NextRunAt, &s.LastRunAt,
		&s.LastOutcome, &s.LastTaskID, &s.LastEnqueuedAt, &s.CreatedAt, &s.UpdatedAt); err != nil {
		return nil, err
	}
	s.Every = time.Duration(everyMS) * time.Millisecond
	if err := json.Unmarshal([]byte(task), &s.Task); err != nil {
		return nil, fmt.Errorf("schedule %s: task: %w", s.Name, err)
	}
	return &s, nil
}

// PutSchedule implements store.Schedules.
func (p *Procedures) PutSchedule(ctx context.Context, s store.Schedule, replace bool, ev bt.Event) error {
	d := p.dialect
	task, err := json.Marshal(s.Task)
	if err != nil {
		return fmt.Errorf("schedule %s: task: %w", s.Name, err)
	}
	q := `INSERT INTO backstop_schedules (name, every_ms, cron, tz, missed, task, paused, next_run_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)`
	if replace {
		// The timing unchanged, the schedule keeps its next tick.
		q += ` ON CONFLICT (name) DO UPDATE SET task = excluded.task, missed = excluded.missed, updated_at = excluded.updated_at,
			next_run_at = CASE WHEN backstop_schedules.every_ms = excluded.every_ms AND backstop_schedules.cron = excluded.cron
				AND backstop_schedules.tz = excluded.tz THEN backstop_schedules.next_run_at ELSE excluded.next_run_at END,
			every_ms = excluded.every_ms, cron = excluded.cron, tz = excluded.tz`
	}
	err = InTx(ctx, p.writer, func(tx Tx) error {
		if _, err := tx.Exec(ctx, q, s.Name, s.Every.Milliseconds(), s.Cron, s.TZ, s.Missed, string(task), s.Paused,
			s.NextRunAt, s.CreatedAt); err != nil {
			return err
		}
		return p.appendAudit(ctx, tx, ev)
	})
	if d.IsUnique(err) {
		return fmt.Errorf("%w: a schedule named %q already exists", store.ErrConflict, s.Name)
	}
	if err != nil {
		return fmt.Errorf("%s: put schedule: %w", d.Prefix, d.Err(err))
	}
	return nil
}

// GetSchedule implements store.Schedules.
func (p *Procedures) GetSchedule(ctx context.Context, name string) (*store.Schedule, error) {
	d := p.dialect
	s, err := scanSchedule(p.reader.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM backstop_schedules WHERE name = $1`, name))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: get schedule: %w", d.Prefix, err)
	}
	return s, nil
}

func (p *Procedures) schedules(ctx context.Context, q Querier, sql string, args ...any) ([]store.Schedule, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: schedules: %w", p.dialect.Prefix, err)
	}
	defer rows.Close()
	out := []store.Schedule{}
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: schedules: %w", p.dialect.Prefix, err)
		}
		out = append(out, *s)
	}
	return out, rows.Err()
}

// ListSchedules implements store.Schedules.
func (p *Procedures) ListSchedules(ctx context.Context) ([]store.Schedule, error) {
	return p.schedules(ctx, p.reader, `SELECT `+scheduleColumns+` FROM backstop_schedules ORDER BY name`)
}

// DueSchedules implements store.Schedules.
func (p *Procedures) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	return p.schedules(ctx, p.reader, `SELECT `+scheduleColumns+` FROM backstop_schedules
		WHERE NOT paused AND next_run_at <= $1 ORDER BY next_run_at, name LIMIT $2`, now, limit)
}

// PauseSchedule implements store.Schedules.
func (p *Procedures) PauseSchedule(ctx context.Context, name string, paused bool, next time.Time, ev func(store.Schedule) bt.Event) (*store.Schedule, error) {
	d := p.dialect
	var out *store.Schedule
	err := InTx(ctx, p.writer, func(tx Tx) error {
		s, err := scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM backstop_schedules WHERE name = $1`+d.ForUpdate, name))
		if errors.Is(err, ErrNoRows) {
			return fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if !paused {
			s.NextRunAt = next.UTC()
		}
		s.Paused = paused
		if _, err := tx.Exec(ctx, `UPDATE backstop_schedules SET paused = $2, next_run_at = $3 WHERE name = $1`,
			name, paused, s.NextRunAt); err != nil {
			return err
		}
		if ev != nil {
			if err := p.appendAudit(ctx, tx, ev(*s)); err != nil {
				return err
			}
		}
		out = s
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%s: pause schedule: %w", d.Prefix, d.Err(err))
	}
	return out, nil
}

// DeleteSchedule implements store.Schedules.
func (p *Procedures) DeleteSchedule(ctx context.Context, name string, ev func(store.Schedule) bt.Event) error {
	d := p.dialect
	err := InTx(ctx, p.writer, func(tx Tx) error {
		s, err := scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM backstop_schedules WHERE name = $1`+d.ForUpdate, name))
		if errors.Is(err, ErrNoRows) {
			return fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM backstop_schedules WHERE name = $1`, name); err != nil {
			return err
		}
		if ev != nil {
			return p.appendAudit(ctx, tx, ev(*s))
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%s: delete schedule: %w", d.Prefix, d.Err(err))
	}
	return nil
}

// AdvanceSchedule is store.ScheduleTx's AdvanceSchedule in q.
func AdvanceSchedule(ctx context.Context, d *Dialect, q Querier, a store.ScheduleAdvance) (bool, error) {
	var enq any
	if !a.Enqueued.IsZero() {
		enq = a.Enqueued
	}
	n, err := q.Exec(ctx, `UPDATE backstop_schedules SET next_run_at = $3, last_run_at = $4, last_outcome = $5,
		last_task_id = CASE WHEN $6 = '' THEN last_task_id ELSE $6 END,
		last_enqueued_at = COALESCE($7, last_enqueued_at), updated_at = $8
		WHERE name = $1 AND next_run_at = $2 AND NOT paused`,
		a.Name, a.From, a.Next, a.LastRun, a.Outcome, a.TaskID, enq, a.Now)
	if err != nil {
		return false, fmt.Errorf("%s: advance schedule %s: %w", d.Prefix, a.Name, d.Err(err))
	}
	return n == 1, nil
}
