package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// defaultListLimit applies when ListFilter.Limit is not set.
const defaultListLimit = 100

// Get implements store.Store: the task, its full payload and its executions.
func (s *Store) Get(ctx context.Context, id string) (*bt.Task, error) {
	tasks, err := s.queryTasks(ctx, sqlGetTask, id)
	if err != nil {
		return nil, fmt.Errorf("pgstore: get %s: %w", id, err)
	}
	if len(tasks) == 0 {
		return nil, notFound(id)
	}
	t := tasks[0]
	if t.Executions, err = s.Executions(ctx, id); err != nil {
		return nil, err
	}
	return t, nil
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, f store.ListFilter) ([]*bt.Task, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, fmt.Sprintf(cond, "$"+strconv.Itoa(len(args))))
	}
	if f.Queue != "" {
		add("t.queue = %s", f.Queue)
	}
	if f.Kind != "" {
		add("t.kind = %s", f.Kind)
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		add("t.state = ANY(%s::text[])", states)
	}
	if f.Reason != "" {
		add("t.dead_reason = %s", string(f.Reason))
	}
	if len(f.Attrs) > 0 {
		attrs, err := json.Marshal(f.Attrs)
		if err != nil {
			return nil, fmt.Errorf("pgstore: list: attributes: %w", err)
		}
		add("t.attributes @> %s::jsonb", string(attrs))
	}
	if len(f.DLQStatuses) > 0 {
		sts := make([]string, len(f.DLQStatuses))
		for i, st := range f.DLQStatuses {
			sts[i] = string(st)
		}
		add("t.dlq_status = ANY(%s::text[])", sts)
	}
	if f.ErrorContains != "" {
		add("strpos(t.last_error, %s) > 0", f.ErrorContains)
	}
	if !f.Since.IsZero() {
		add("t.last_seen >= %s", f.Since)
	}
	if !f.Until.IsZero() {
		add("t.last_seen <= %s", f.Until)
	}
	if f.AfterID != "" {
		add("t.id > %s", f.AfterID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	args = append(args, limit)
	tasks, err := s.queryTasks(ctx, listQuery(where, len(args), f.WithoutPayload), args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list: %w", err)
	}
	return tasks, nil
}

// Executions implements store.Store: the task's attempts, oldest first.
func (s *Store) Executions(ctx context.Context, taskID string) ([]bt.Execution, error) {
	rs, err := s.pool.Query(ctx, sqlExecutions, taskID)
	if err != nil {
		return nil, fmt.Errorf("pgstore: executions of %s: %w", taskID, err)
	}
	defer rs.Close()
	var out []bt.Execution
	for rs.Next() {
		e, err := scanExecution(rs)
		if err != nil {
			return nil, fmt.Errorf("pgstore: executions of %s: %w", taskID, err)
		}
		out = append(out, e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: executions of %s: %w", taskID, err)
	}
	return out, nil
}

func notFound(id string) error {
	return fmt.Errorf("pgstore: task %s: %w", id, store.ErrNotFound)
}

// isNoRows reports pgx's "no rows" error.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
