-- Idempotency keys with a window (unique per period): a task enqueued with
-- one holds its key until unique_until (microseconds since the epoch)
-- whatever its state, and past it a new task takes the key even while the
-- old one still runs. Such tasks stay out of the one-live-task-per-key
-- index (the single writer keeps their enqueues apart), and are found
-- through backstop_tasks_idempotency_any.

-- +goose Up
ALTER TABLE backstop_tasks ADD COLUMN unique_until INTEGER;
DROP INDEX backstop_tasks_idempotency;
CREATE UNIQUE INDEX backstop_tasks_idempotency ON backstop_tasks (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND unique_until IS NULL AND state IN ('scheduled', 'pending', 'running', 'buffered');

-- +goose Down
DROP INDEX backstop_tasks_idempotency;
CREATE UNIQUE INDEX backstop_tasks_idempotency ON backstop_tasks (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running', 'buffered');
ALTER TABLE backstop_tasks DROP COLUMN unique_until;
