-- Maintenance: the leadership lease and the indexes retention and the
-- recent-failures view need. Times are INTEGER microseconds (UTC).

-- +goose Up
-- One row per leadership (e.g. 'maintenance'): held by leader_id until
-- expires_at, taken over by anyone once it has passed.
CREATE TABLE backstop_leaders (
    name       TEXT PRIMARY KEY,
    leader_id  TEXT NOT NULL,
    elected_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

-- Retention deletes finished tasks oldest first without scanning the table.
CREATE INDEX backstop_tasks_finished ON backstop_tasks (state, finalized_at)
    WHERE state IN ('succeeded', 'canceled');
-- Recent failures read failed attempts by time.
CREATE INDEX backstop_executions_failed ON backstop_executions (finished_at)
    WHERE outcome IN ('transient_error', 'permanent_error', 'timeout', 'lease_expired');

-- +goose Down
DROP INDEX backstop_executions_failed;
DROP INDEX backstop_tasks_finished;
DROP TABLE backstop_leaders;
