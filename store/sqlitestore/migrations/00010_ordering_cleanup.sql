-- Ordered processing (docs/ordering.md), second part: a deleted task
-- (retention, purge) takes its ordering row with it; key state is found by
-- index: busy keys (to notice their task's end) and idle keys (to expire);
-- a task replayed from the dead-letter queue waits for its key (status replay).

-- +goose Up
DELETE FROM backstop_ordering_tasks WHERE task_id NOT IN (SELECT id FROM backstop_tasks);

-- +goose StatementBegin
CREATE TRIGGER backstop_ordering_tasks_gone AFTER DELETE ON backstop_tasks
BEGIN
    DELETE FROM backstop_ordering_tasks WHERE task_id = OLD.id;
END;
-- +goose StatementEnd

CREATE INDEX backstop_ordering_keys_busy ON backstop_ordering_keys (queue)
    WHERE busy_task IS NOT NULL;
CREATE INDEX backstop_ordering_keys_idle ON backstop_ordering_keys (queue, expires_at)
    WHERE busy_task IS NULL AND drain_due_at IS NULL;

-- Tasks replayed from the dead-letter queue wait with status replay.
DROP INDEX backstop_ordering_tasks_open;
CREATE INDEX backstop_ordering_tasks_waiting ON backstop_ordering_tasks (queue, okey, seq)
    WHERE status IN ('held', 'gap', 'ready', 'replay');
-- Admission looks for new and replayed tasks: a small index of those only.
CREATE INDEX backstop_ordering_tasks_new ON backstop_ordering_tasks (queue)
    WHERE status IN ('held', 'replay');

-- +goose Down
DROP INDEX backstop_ordering_tasks_new;
DROP INDEX backstop_ordering_tasks_waiting;
CREATE INDEX backstop_ordering_tasks_open ON backstop_ordering_tasks (queue, okey, seq)
    WHERE status IN ('held', 'gap', 'ready');
DROP INDEX backstop_ordering_keys_idle;
DROP INDEX backstop_ordering_keys_busy;
DROP TRIGGER backstop_ordering_tasks_gone;
