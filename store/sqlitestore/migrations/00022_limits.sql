-- Cluster-wide concurrency limits: a limit's budget is the running rows
-- of its scope (queue, kind when set, one budget per value of the per
-- attribute when set). Times are INTEGER microseconds since the Unix epoch.

-- +goose Up
CREATE TABLE backstop_limits (
    name        TEXT PRIMARY KEY,
    queue       TEXT NOT NULL,
    kind        TEXT NOT NULL DEFAULT '',
    per         TEXT NOT NULL DEFAULT '',
    concurrency INTEGER NOT NULL CHECK (concurrency > 0),
    created_at  INTEGER NOT NULL
);
CREATE INDEX backstop_limits_queue ON backstop_limits (queue);
-- A limited claim counts its queue's running rows.
CREATE INDEX backstop_tasks_running ON backstop_tasks (queue, kind) WHERE state = 'running';

-- +goose Down
DROP INDEX backstop_tasks_running;
DROP TABLE backstop_limits;
