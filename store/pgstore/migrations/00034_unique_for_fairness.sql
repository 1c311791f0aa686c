-- Idempotency keys with a window (unique per period): a task enqueued with
-- one holds its key until unique_until whatever its state, and past it a
-- new task takes the key even while the old one still runs. Such tasks
-- stay out of the one-live-task-per-key index; their enqueues take a
-- transaction-scoped advisory lock on the key instead, and find the
-- holder through backstop_tasks_idempotency_any.
--
-- Fair queues: claims rotate across the values of an attribute (weighted
-- round robin within a priority). A fair claim locks its queue's row of
-- backstop_fair_queues, so the fair claims of a queue take turns, and
-- keeps each value's pass (its claims so far, each 1/weight) in
-- backstop_fair_passes.

-- +goose Up
CREATE TABLE backstop_fair_queues (
    queue      text PRIMARY KEY,
    by_attr    text NOT NULL,
    weights    text NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL
);
CREATE TABLE backstop_fair_passes (
    queue text NOT NULL,
    value text NOT NULL,
    pass  double precision NOT NULL,
    PRIMARY KEY (queue, value)
);
ALTER TABLE backstop_tasks ADD COLUMN unique_until timestamptz;
DROP INDEX backstop_tasks_idempotency;
CREATE UNIQUE INDEX backstop_tasks_idempotency ON backstop_tasks (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND unique_until IS NULL AND state IN ('scheduled', 'pending', 'running', 'buffered');

-- +goose Down
DROP TABLE backstop_fair_passes;
DROP TABLE backstop_fair_queues;
DROP INDEX backstop_tasks_idempotency;
CREATE UNIQUE INDEX backstop_tasks_idempotency ON backstop_tasks (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running', 'buffered');
ALTER TABLE backstop_tasks DROP COLUMN unique_until;
