-- Three reads of the console that scanned, made index reads.
--
-- 1. A where's equality and `in` on payload fields read the GIN index of
-- payloads (migration 00026) for waiting tasks too, not only for dead
-- letters: the index now holds the tasks in the states a task waits in
-- (pending, scheduled, buffered) and the dead letters. A task pays for it
-- when it is enqueued (or goes back to waiting: a retry, a replay), never
-- when it is claimed or settled (running, succeeded and canceled tasks are
-- not in it; an update of the state is never HOT here, and a partial
-- index whose predicate the new row fails is not written). The SQL of a
-- where on tasks of any state reads this index for those states and scans
-- only the running, succeeded and canceled ones (store/pgstore/read.go).
--
-- 2. The audit stream (the operators' actions: an event row whose actor is
-- set and whose type is an audited one) is read through an index of the
-- log rows that have an actor, by type, instead of a window scan of the
-- whole log. The hot path's rows (claims, settles) have no actor and are
-- not in it; an enqueue's row is (one entry per enqueue statement).
--
-- 3. A worker's executions, newest first, are ordered by (started_at,
-- execution_id): the worker index now holds both, so the newest page is
-- the index's last entries (it held started_at only, and a worker's 100,000
-- executions were read and sorted for a page of 20: 120 ms). It replaces
-- the index of migration 00009, which every execution already writes.

-- +goose Up
DROP INDEX backstop_tasks_payload;
CREATE INDEX backstop_tasks_payload ON backstop_tasks USING gin (backstop_payload_index(payload) jsonb_path_ops)
    WHERE state IN ('pending', 'scheduled', 'buffered', 'dead');
CREATE INDEX backstop_events_actor ON backstop_events (type, xid, seq) WHERE actor <> '';
DROP INDEX backstop_executions_worker;
CREATE INDEX backstop_executions_worker ON backstop_executions (worker_id, started_at, execution_id);

-- +goose Down
DROP INDEX backstop_executions_worker;
CREATE INDEX backstop_executions_worker ON backstop_executions (worker_id, started_at);
DROP INDEX backstop_events_actor;
DROP INDEX backstop_tasks_payload;
CREATE INDEX backstop_tasks_payload ON backstop_tasks USING gin (backstop_payload_index(payload) jsonb_path_ops)
    WHERE state = 'dead';
