-- Ordered processing (docs/ordering.md), second part: a deleted task
-- (retention, purge) takes its ordering row with it; key state is found by
-- index: busy keys (to notice their task's end) and idle keys (to expire).

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

-- +goose Down
DROP INDEX backstop_ordering_keys_idle;
DROP INDEX backstop_ordering_keys_busy;
DROP TRIGGER backstop_ordering_tasks_gone;
