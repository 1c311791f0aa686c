-- A worker's executions, newest first, are ordered by (started_at,
-- execution_id): the worker index now holds both, so the newest page is
-- the index's last entries (it held started_at only, and executions that
-- started in the same microsecond were sorted after reading them all). It
-- replaces the index of migration 00008, which every execution already
-- writes.

-- +goose Up
DROP INDEX backstop_executions_worker;
CREATE INDEX backstop_executions_worker ON backstop_executions (worker_id, started_at, execution_id);

-- +goose Down
DROP INDEX backstop_executions_worker;
CREATE INDEX backstop_executions_worker ON backstop_executions (worker_id, started_at);
