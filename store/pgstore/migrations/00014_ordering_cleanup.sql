-- Ordered processing (docs/ordering.md), second part: a deleted task
-- (retention, purge) takes its ordering row with it (the cascade runs with
-- the table owner's rights, so no role needs more grants); key state is
-- found by index: busy keys (to notice their task's end) and idle keys (to
-- expire).

-- +goose Up
DELETE FROM backstop_ordering_tasks o WHERE NOT EXISTS (SELECT 1 FROM backstop_tasks t WHERE t.id = o.task_id);
ALTER TABLE backstop_ordering_tasks ADD CONSTRAINT backstop_ordering_tasks_task_fk
    FOREIGN KEY (task_id) REFERENCES backstop_tasks (id) ON DELETE CASCADE;

CREATE INDEX backstop_ordering_keys_busy ON backstop_ordering_keys (queue)
    WHERE busy_task IS NOT NULL;
CREATE INDEX backstop_ordering_keys_idle ON backstop_ordering_keys (queue, expires_at)
    WHERE busy_task IS NULL AND drain_due_at IS NULL;

-- +goose Down
DROP INDEX backstop_ordering_keys_idle;
DROP INDEX backstop_ordering_keys_busy;
ALTER TABLE backstop_ordering_tasks DROP CONSTRAINT backstop_ordering_tasks_task_fk;
