-- Cluster-wide concurrency limits: a limit's budget is the running rows
-- of its scope (queue, kind when set, one budget per value of the per
-- attribute when set). A limited claim locks the queue's limit rows, so
-- claimers of a limited queue take their turns and each sees the others'
-- claims.

-- +goose Up
CREATE TABLE backstop_limits (
    name        text PRIMARY KEY,
    queue       text NOT NULL,
    kind        text NOT NULL DEFAULT '',
    per         text NOT NULL DEFAULT '',
    concurrency integer NOT NULL CHECK (concurrency > 0),
    created_at  timestamptz NOT NULL
);
CREATE INDEX backstop_limits_queue ON backstop_limits (queue);
-- A limited claim counts its queue's running rows under the limits' lock.
CREATE INDEX backstop_tasks_running ON backstop_tasks (queue, kind) WHERE state = 'running';

-- +goose Down
DROP INDEX backstop_tasks_running;
DROP TABLE backstop_limits;
