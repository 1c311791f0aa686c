package engine

// Correlation attributes of a task that every log line about it carries,
// on every path (the in-process worker, the API and the remote protocol,
// maintenance), so a log search by any of them finds the task's lines.
var correlationAttributes = []string{RunAttribute, "plan_hash", "origin_run_ids"}

// TaskLogAttrs are the slog arguments that name t in a log line: task_id,
// queue, kind, attempt and execution_id (when set), and its attributes
// run_id, plan_hash and origin_run_ids when present.
func TaskLogAttrs(t *Task) []any {
	if t == nil {
		return nil
	}
	args := make([]any, 0, 16)
	args = append(args, "task_id", t.ID)
	if t.Queue != "" {
		args = append(args, "queue", t.Queue, "kind", t.Kind)
	}
	if t.Attempt > 0 {
		args = append(args, "attempt", t.Attempt)
	}
	if t.ExecutionID != "" {
		args = append(args, "execution_id", t.ExecutionID)
	}
	for _, k := range correlationAttributes {
		if v := t.Attributes[k]; v != "" {
			args = append(args, k, v)
		}
	}
	return args
}
