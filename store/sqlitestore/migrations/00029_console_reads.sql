-- Two reads of the console that scanned, made index reads.
--
-- 1. A worker's executions, newest first, are ordered by (started_at,
-- execution_id): the worker index now holds both, so the newest page is
-- the index's last entries (it held started_at only, and executions that
-- started in the same microsecond were sorted after reading them all). It
-- replaces the index of migration 00008, which every execution already
-- writes.
--
-- 2. The audit stream (the operators' actions: a log row whose actor is
-- set and whose type is an audited one) is read through an index of the
-- log rows that have an actor, by type, instead of a window scan of the
-- whole log. The hot path's rows (claims, settles) have no actor and are
-- not in it; an enqueue's row is (one entry per enqueue statement).

-- +goose Up
DROP INDEX backstop_executions_worker;
CREATE INDEX backstop_executions_worker ON backstop_executions (worker_id, started_at, execution_id);
CREATE INDEX backstop_events_actor ON backstop_events (type, seq) WHERE actor <> '';

-- +goose Down
DROP INDEX backstop_events_actor;
DROP INDEX backstop_executions_worker;
CREATE INDEX backstop_executions_worker ON backstop_executions (worker_id, started_at);
