package sqldialect

import (
	"context"
	"errors"
	"fmt"
	"strings"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is store.TaskActions: an operator's action on live tasks
// (cancel, run now, delete, change priority), a batch per transaction with
// each task's event and outcome and the bulk job's advance.

// ApplyTaskAction implements store.TaskActions.
func (p *Procedures) ApplyTaskAction(ctx context.Context, b store.TaskActionBatch) (store.TaskActionResult, error) {
	d := p.dialect
	allowed, ok := store.ActionStates[b.Action]
	if !ok {
		return store.TaskActionResult{}, fmt.Errorf("%s: unknown task action %q", d.Prefix, b.Action)
	}
	var out store.TaskActionResult
	err := InTx(ctx, p.writer, func(tx Tx) error {
		out = store.TaskActionResult{Items: make([]store.RedriveItem, 0, len(b.IDs))}
		var events []bt.Event
		wake := map[string]bool{}
		for _, id := range b.IDs {
			item := store.RedriveItem{RedriveID: b.JobID, TaskID: id, At: b.Now}
			t, err := d.GetTask(ctx, tx, id, true)
			switch {
			case errors.Is(err, store.ErrNotFound):
				item.Outcome, item.Detail = store.OutcomeSkipped, "no such task (deleted meanwhile?)"
			case err != nil:
				return err
			default:
				item.Outcome, item.Detail = skipReason(b.Action, t, allowed)
			}
			if item.Outcome == "" {
				after, err := applyOne(ctx, d, tx, b, t)
				if err != nil {
					return fmt.Errorf("%s: %s %s: %w", d.Prefix, b.Action, id, err)
				}
				item.Outcome = actionOutcome(b.Action, t.State)
				events = append(events, store.TaskActionEvent(b, t, t.State))
				if after != nil {
					out.Canceled = append(out.Canceled, after)
				}
				if b.Action == store.JobTaskRunNow {
					wake[t.Queue] = true
				}
				out.Changed++
			} else {
				out.Skipped++
			}
			out.Items = append(out.Items, item)
			if b.JobID != "" {
				if _, err := tx.Exec(ctx, UpsertRedriveItemSQL, b.JobID, id, item.Outcome, item.Detail, b.Now); err != nil {
					return err
				}
			}
		}
		if err := d.TaskEvents(ctx, tx, events); err != nil {
			return err
		}
		if b.JobID != "" && len(b.IDs) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE backstop_redrives SET cursor = $1, replayed = replayed + $2, failed = failed + $3
				WHERE id = $4`, b.IDs[len(b.IDs)-1], out.Changed, out.Skipped, b.JobID); err != nil {
				return err
			}
		}
		for q := range wake {
			if err := tx.Wake(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.TaskActionResult{}, err
	}
	return out, nil
}

// skipReason says why t is left as it is ("" outcome: it is not).
func skipReason(action string, t *bt.Task, allowed []bt.State) (outcome, detail string) {
	ok := false
	for _, s := range allowed {
		ok = ok || s == t.State
	}
	switch {
	case !ok && t.State == bt.StateRunning:
		return store.OutcomeSkipped, "running: left to its worker (cancel it instead)"
	case !ok:
		return store.OutcomeSkipped, fmt.Sprintf("%s: not %s", t.State, joinStates(allowed))
	case action == store.JobTaskDelete && strings.IndexByte(t.ID, '.') >= 0:
		return store.OutcomeSkipped, "a workflow step: cancel it (or its run) instead"
	case action == store.JobTaskDelete && t.OrderingKey != "":
		return store.OutcomeSkipped, "ordered: its key's line waits for it; cancel it instead"
	}
	return "", ""
}

func joinStates(ss []bt.State) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func actionOutcome(action string, from bt.State) string {
	switch action {
	case store.JobTaskCancel:
		if from == bt.StateRunning {
			return store.OutcomeCancelRequested
		}
		return store.OutcomeCanceled
	case store.JobTaskRunNow:
		return store.OutcomeRunNow
	case store.JobTaskDelete:
		return store.OutcomeDeleted
	}
	return store.OutcomeReprioritized
}

// applyOne changes t (locked, in a state the action allows); a cancel
// returns the task as it is after.
func applyOne(ctx context.Context, d *Dialect, tx Tx, b store.TaskActionBatch, t *bt.Task) (*bt.Task, error) {
	var err error
	switch b.Action {
	case store.JobTaskCancel:
		if t.State == bt.StateRunning {
			_, err = tx.Exec(ctx, `UPDATE backstop_tasks SET cancel_requested_at = COALESCE(cancel_requested_at, $1),
				updated_at = $1 WHERE id = $2`, b.Now, t.ID)
		} else {
			_, err = tx.Exec(ctx, `UPDATE backstop_tasks SET state = 'canceled', finalized_at = $1, updated_at = $1,
				cancel_requested_at = $1 WHERE id = $2`, b.Now, t.ID)
		}
		if err != nil {
			return nil, err
		}
		return d.GetTask(ctx, tx, t.ID, false)
	case store.JobTaskRunNow:
		_, err = tx.Exec(ctx, `UPDATE backstop_tasks SET state = 'pending', run_at = $1, updated_at = $1 WHERE id = $2`, b.Now, t.ID)
	case store.JobTaskDelete:
		// The history stays: the task's events, task.deleted last, are
		// what is left of it.
		for _, q := range []string{`DELETE FROM backstop_executions WHERE task_id = $1`,
			`DELETE FROM backstop_payloads WHERE task_id = $1`, `DELETE FROM backstop_tasks WHERE id = $1`} {
			if _, err = tx.Exec(ctx, q, t.ID); err != nil {
				return nil, err
			}
		}
	case store.JobTaskReprioritize:
		_, err = tx.Exec(ctx, `UPDATE backstop_tasks SET priority = $1, updated_at = $2 WHERE id = $3`, b.Priority, b.Now, t.ID)
	}
	return nil, err
}
