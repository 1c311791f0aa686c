package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/backstophq/backstop/workflow"
)

// A fan-out item's stored payload refers to its run's input
// (workflow.InputRef) rather than copying it: 10,000 items of a run with a
// large input would otherwise write the input 10,000 times. Whoever hands
// a task to a handler (the Worker, the remote protocol's claim) puts the
// input back first, so a handler receives the payload docs/workflows.md
// describes; the run's input is read once per claimed batch.

// errRunInputGone: the task refers to a run input that no longer exists
// (the run was deleted by retention, or the task is not a step of it).
var errRunInputGone = errors.New("its workflow run's input is gone")

// InputRef is the run whose input t's payload refers to, or "" when t is
// not a fan-out item that refers to one (a plain task is never touched,
// whatever its payload holds).
func InputRef(t *Task) string {
	run := t.Attributes[workflow.AttrRunID]
	if run == "" || !strings.HasPrefix(t.ID, run+".") {
		return ""
	}
	if workflow.InputRefOf(t.Payload) != run {
		return ""
	}
	return run
}

// stepInputs puts the run's input into the payloads of the fan-out items
// among tasks (workflow.WithInput). The tasks it could not complete are
// returned with why: a store error (to be retried), or Permanent when the
// input is gone; they must not reach a handler.
func (e *Engine) stepInputs(ctx context.Context, tasks []*Task) map[*Task]error {
	var ids []string
	for _, t := range tasks {
		if InputRef(t) != "" {
			ids = append(ids, t.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	inputs, err := e.store.RunInputsOfTasks(ctx, ids)
	bad := map[*Task]error{}
	for _, t := range tasks {
		if InputRef(t) == "" {
			continue
		}
		if err != nil {
			bad[t] = fmt.Errorf("reading the input of workflow run %s: %w", InputRef(t), err)
			continue
		}
		p, err := WithStepInput(t, inputs)
		if err != nil {
			bad[t] = Permanent(err)
			continue
		}
		t.Payload = p
	}
	return bad
}

// WithStepInput is t's payload with its run's input (inputs: by task id,
// RunInputsOfTasks's) in place of the reference; t's payload as it is when
// it refers to none.
func WithStepInput(t *Task, inputs map[string]json.RawMessage) (json.RawMessage, error) {
	run := InputRef(t)
	if run == "" {
		return t.Payload, nil
	}
	in, ok := inputs[t.ID]
	if !ok {
		return nil, fmt.Errorf("task %s: %w (workflow run %s)", t.ID, errRunInputGone, run)
	}
	p, err := workflow.WithInput(t.Payload, in)
	if err != nil {
		return nil, fmt.Errorf("task %s: its payload: %v", t.ID, err)
	}
	return p, nil
}
