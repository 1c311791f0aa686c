package sqldialect

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is store.TaskActions: an operator's action on live tasks
// (cancel, run now, delete, change priority), a batch per transaction with
// each task's event and outcome and the bulk job's advance.

// ApplyTaskAction implements store.TaskActions: the batch's rows are read
// and locked in one statement, judged in Go, and changed with one
// statement per kind of change; the events, the items and the record's
// advance are written in the same transaction.
func (p *Procedures) ApplyTaskAction(ctx context.Context, b store.TaskActionBatch) (store.TaskActionResult, error) {
	d := p.dialect
	allowed, ok := store.ActionStates[b.Action]
	if !ok {
		return store.TaskActionResult{}, fmt.Errorf("%s: unknown task action %q", d.Prefix, b.Action)
	}
	var out store.TaskActionResult
	err := InTx(ctx, p.writer, func(tx Tx) error {
		out = store.TaskActionResult{Items: make([]store.RedriveItem, 0, len(b.IDs))}
		found, err := lockTasks(ctx, d, tx, b.IDs)
		if err != nil {
			return err
		}
		var events []bt.Event
		change := map[string][]string{} // a statement of applyTo → its ids
		wake := map[string]bool{}
		for _, id := range b.IDs {
			item := store.RedriveItem{RedriveID: b.JobID, TaskID: id, At: b.Now}
			t := found[id]
			if t == nil {
				item.Outcome, item.Detail = store.OutcomeSkipped, "no such task (deleted meanwhile?)"
			} else {
				item.Outcome, item.Detail = skipReason(b.Action, t, allowed)
			}
			if item.Outcome != "" {
				out.Skipped++
				out.Items = append(out.Items, item)
				continue
			}
			item.Outcome = actionOutcome(b.Action, t.State)
			out.Items = append(out.Items, item)
			out.Changed++
			events = append(events, store.TaskActionEvent(b, t, t.State))
			change[item.Outcome] = append(change[item.Outcome], id)
			if b.Action == store.JobTaskRunNow {
				wake[t.Queue] = true
			}
		}
		for outcome, ids := range change {
			if err := applyTo(ctx, d, tx, b, outcome, ids); err != nil {
				return fmt.Errorf("%s: %s: %w", d.Prefix, b.Action, err)
			}
			if b.Action != store.JobTaskCancel {
				continue
			}
			for _, id := range ids { // a workflow step's run learns of its cancel (the engine's)
				if strings.IndexByte(id, '.') >= 0 {
					t, err := d.GetTask(ctx, tx, id, false)
					if err != nil {
						return err
					}
					out.Canceled = append(out.Canceled, t)
				}
			}
		}
		if err := d.TaskEvents(ctx, tx, events); err != nil {
			return err
		}
		if b.JobID != "" && len(b.IDs) > 0 {
			if err := recordItems(ctx, tx, out.Items); err != nil {
				return err
			}
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

// lockTasks reads and locks the tasks of ids that exist: what an action
// judges them by (state, ordered) and what their events name.
func lockTasks(ctx context.Context, d *Dialect, tx Tx, ids []string) (map[string]*bt.Task, error) {
	out := make(map[string]*bt.Task, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `SELECT t.id, t.state, t.queue, t.kind, t.priority, t.attributes,
		EXISTS (SELECT 1 FROM backstop_ordering_tasks o WHERE o.task_id = t.id)
		FROM backstop_tasks t WHERE t.id `+d.InText("$1")+` ORDER BY t.id`+d.ForUpdate, d.TextList(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			t       bt.Task
			state   string
			attrs   []byte
			ordered bool
		)
		if err := rows.Scan(&t.ID, &state, &t.Queue, &t.Kind, &t.Priority, &attrs, &ordered); err != nil {
			return nil, err
		}
		t.State = bt.State(state)
		if len(attrs) > 0 {
			if err := json.Unmarshal(attrs, &t.Attributes); err != nil {
				return nil, fmt.Errorf("task %s: attributes: %w", t.ID, err)
			}
		}
		if ordered {
			t.OrderingKey = "(ordered)" // only whether it is: skipReason
		}
		out[t.ID] = &t
	}
	return out, rows.Err()
}

// applyTo makes the change of outcome to ids (locked, each in a state the
// action allows).
func applyTo(ctx context.Context, d *Dialect, tx Tx, b store.TaskActionBatch, outcome string, ids []string) error {
	in, list := d.InText("$2"), d.TextList(ids)
	var err error
	switch outcome {
	case store.OutcomeCancelRequested:
		_, err = tx.Exec(ctx, `UPDATE backstop_tasks SET cancel_requested_at = COALESCE(cancel_requested_at, $1),
			updated_at = $1 WHERE id `+in, b.Now, list)
	case store.OutcomeCanceled:
		_, err = tx.Exec(ctx, `UPDATE backstop_tasks SET state = 'canceled', finalized_at = $1, updated_at = $1,
			cancel_requested_at = $1 WHERE id `+in, b.Now, list)
	case store.OutcomeRunNow:
		_, err = tx.Exec(ctx, `UPDATE backstop_tasks SET state = 'pending', run_at = $1, updated_at = $1 WHERE id `+in, b.Now, list)
	case store.OutcomeReprioritized:
		_, err = tx.Exec(ctx, `UPDATE backstop_tasks SET priority = $1, updated_at = $3 WHERE id `+in, b.Priority, list, b.Now)
	case store.OutcomeDeleted:
		// The history stays: the task's events, task.deleted last, are
		// what is left of it.
		in = d.InText("$1")
		for _, q := range []string{`DELETE FROM backstop_executions WHERE task_id `, `DELETE FROM backstop_payloads WHERE task_id `,
			`DELETE FROM backstop_tasks WHERE id `} {
			if _, err = tx.Exec(ctx, q+in, list); err != nil {
				return err
			}
		}
	}
	return err
}

// recordItems upserts the items' outcomes, a few hundred rows per
// statement.
func recordItems(ctx context.Context, tx Tx, items []store.RedriveItem) error {
	const per = 200
	for len(items) > 0 {
		chunk := items[:min(per, len(items))]
		items = items[len(chunk):]
		var a args
		vals := make([]string, len(chunk))
		for i, it := range chunk {
			vals[i] = "(" + a.add(it.RedriveID) + ", " + a.add(it.TaskID) + ", " + a.add(it.Outcome) + ", " + a.add(it.Detail) + ", " + a.add(it.At) + ")"
		}
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_redrive_items (redrive_id, task_id, outcome, detail, at) VALUES `+
			strings.Join(vals, ", ")+`
			ON CONFLICT (redrive_id, task_id) DO UPDATE SET outcome = excluded.outcome, detail = excluded.detail, at = excluded.at`, a...); err != nil {
			return err
		}
	}
	return nil
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
