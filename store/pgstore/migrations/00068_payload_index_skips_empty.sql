-- The payload GIN index (00026, 00038) leaves out the tasks whose payload
-- is the empty object, {} (what a task enqueued without a payload holds).
--
-- A where reads this index for a containment of a payload document
-- (internal/filter: == and in on payload paths): a document holding a
-- literal at a path, or the literal itself at the root, or the marker
-- {"":1e400}. The empty object contains none of them, so an indexed where
-- is false on every such task already, and holding those tasks only cost
-- their writes: an entry per task in the index's pending list, written by
-- every enqueue (1.7-3.8 ms of server CPU per 1,000 tasks and 170 B of WAL
-- per task; with durable settings a batch enqueue's server CPU fell 40 %
-- without it: docs/benchmarks.md, "Postgres batch enqueue against COPY:
-- empty payloads out of the payload GIN index").
--
-- The SQL of an indexed where carries the same condition beside its
-- containment (read.go: payloadIndexHolds), so that the planner proves
-- this predicate; on a schema before this one the condition is true of
-- every row the containment selects, and changes no answer. A spilled
-- payload (NULL here) stays in the index as the marker.

-- +goose Up
DROP INDEX backstop_tasks_payload;
CREATE INDEX backstop_tasks_payload ON backstop_tasks USING gin (backstop_payload_index(payload) jsonb_path_ops)
    WHERE state IN ('pending', 'scheduled', 'buffered', 'dead') AND (payload IS NULL OR payload::text <> '{}');

-- +goose Down
DROP INDEX backstop_tasks_payload;
CREATE INDEX backstop_tasks_payload ON backstop_tasks USING gin (backstop_payload_index(payload) jsonb_path_ops)
    WHERE state IN ('pending', 'scheduled', 'buffered', 'dead');
