-- Task ids, queue and kind names, keys and the other names Backstop's
-- tables key and index by compare by their bytes (COLLATE "C"), whatever
-- the database's default collation, as the workflow tables (00021) already
-- do and as SQLite always does.
--
-- Under a libc or ICU locale such as en-US (the default of most packaged
-- and hosted servers), every comparison of a text column under the
-- database's default collation in a btree (the primary key, the claim
-- index, the merge and idempotency keys, the counts) calls strcoll or ICU
-- instead of memcmp: in an ICU en-US database the claim and the settle
-- cost the server 5-13 % more CPU than in a C one (docs/benchmarks.md,
-- "Collation"). Lists page
-- by these columns in byte order, the order SQLite gives: "Z" before "a",
-- "-" before "_". Equality (what keys and foreign keys check) is the same
-- under both, so no unique key can newly collide.
--
-- Free text (errors, log lines, the dead letters' group texts) and fixed
-- words (state, dlq_status, outcome) keep the default collation: nothing
-- pages by them, and lower() and ILIKE would fold only ASCII under "C".
-- The events log's arrays of task ids, queues and kinds take "C" too: its
-- GIN index on subjects answers a containment of task ids only in the
-- collation of the ids compared (`subjects && array_agg(t.id)` reads the
-- whole index otherwise). A change of type resets a column's compression
-- and storage, which 00011 set: they are set again as 00011 set them.
-- The events' type keeps the default.
--
-- A change of collation alone does not rewrite a table (text to text is
-- binary coercible) but rebuilds every index on the columns it changes,
-- under the ALTER TABLE's exclusive lock: on backstop_tasks, all but the
-- indexes on times and states (docs/benchmarks.md times it on 1M tasks).
-- The views that read the changed columns are dropped and made again
-- as 00003 made them. A process connected meanwhile fails each statement
-- it had prepared that reads a changed column once ("cached plan must not
-- change result type"; pgx then prepares it again): migrate with the
-- workers and servers stopped, or expect those errors once.
--
-- With the ids in byte order the run index can leave the workflow's step
-- tasks out, as 00058 does on a C database; it is rebuilt so here (the
-- read serves both forms: store/pgstore listWhere).

-- +goose Up
DROP VIEW backstop_recent_failures;
DROP VIEW backstop_retry_exhausted;
DROP VIEW backstop_dead_letters;
DROP VIEW backstop_pending_retries;
DROP INDEX backstop_tasks_run;

ALTER TABLE backstop_tasks
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN queue TYPE text COLLATE "C",
    ALTER COLUMN kind TYPE text COLLATE "C",
    ALTER COLUMN merge_key TYPE text COLLATE "C",
    ALTER COLUMN idempotency_key TYPE text COLLATE "C",
    ALTER COLUMN execution_id TYPE text COLLATE "C",
    ALTER COLUMN worker_id TYPE text COLLATE "C",
    ALTER COLUMN replayed_from TYPE text COLLATE "C";
ALTER TABLE backstop_payloads ALTER COLUMN task_id TYPE text COLLATE "C";
ALTER TABLE backstop_executions
    ALTER COLUMN execution_id TYPE text COLLATE "C",
    ALTER COLUMN task_id TYPE text COLLATE "C",
    ALTER COLUMN worker_id TYPE text COLLATE "C";
ALTER TABLE backstop_execution_logs
    ALTER COLUMN execution_id TYPE text COLLATE "C",
    ALTER COLUMN task_id TYPE text COLLATE "C";
ALTER TABLE backstop_ordering_tasks
    ALTER COLUMN task_id TYPE text COLLATE "C",
    ALTER COLUMN queue TYPE text COLLATE "C",
    ALTER COLUMN okey TYPE text COLLATE "C";
ALTER TABLE backstop_ordering_keys
    ALTER COLUMN queue TYPE text COLLATE "C",
    ALTER COLUMN okey TYPE text COLLATE "C",
    ALTER COLUMN busy_task TYPE text COLLATE "C";
ALTER TABLE backstop_task_counts ALTER COLUMN queue TYPE text COLLATE "C";
ALTER TABLE backstop_task_count_deltas ALTER COLUMN queue TYPE text COLLATE "C";
ALTER TABLE backstop_dlq_group_counts ALTER COLUMN queue TYPE text COLLATE "C";
ALTER TABLE backstop_dlq_group_count_deltas ALTER COLUMN queue TYPE text COLLATE "C";
ALTER TABLE backstop_queues ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE backstop_limits
    ALTER COLUMN name TYPE text COLLATE "C",
    ALTER COLUMN queue TYPE text COLLATE "C";
ALTER TABLE backstop_limit_buckets
    ALTER COLUMN limit_name TYPE text COLLATE "C",
    ALTER COLUMN value TYPE text COLLATE "C";
ALTER TABLE backstop_activity
    ALTER COLUMN queue TYPE text COLLATE "C",
    ALTER COLUMN kind TYPE text COLLATE "C";
ALTER TABLE backstop_fair_queues ALTER COLUMN queue TYPE text COLLATE "C";
ALTER TABLE backstop_fair_passes
    ALTER COLUMN queue TYPE text COLLATE "C",
    ALTER COLUMN value TYPE text COLLATE "C";
ALTER TABLE backstop_redrives ALTER COLUMN id TYPE text COLLATE "C";
ALTER TABLE backstop_redrive_items
    ALTER COLUMN redrive_id TYPE text COLLATE "C",
    ALTER COLUMN task_id TYPE text COLLATE "C";
ALTER TABLE backstop_run_steps ALTER COLUMN task_id TYPE text COLLATE "C";
ALTER TABLE backstop_run_wakeups ALTER COLUMN run_id TYPE text COLLATE "C";
ALTER TABLE backstop_schedules
    ALTER COLUMN name TYPE text COLLATE "C",
    ALTER COLUMN last_task_id TYPE text COLLATE "C";
ALTER TABLE backstop_workers ALTER COLUMN id TYPE text COLLATE "C";
ALTER TABLE backstop_tokens
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE backstop_secrets ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE backstop_leaders ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE backstop_event_checkpoints ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE backstop_relay_checkpoints
    ALTER COLUMN name TYPE text COLLATE "C",
    ALTER COLUMN stream TYPE text COLLATE "C";
ALTER TABLE backstop_ingest_positions
    ALTER COLUMN group_name TYPE text COLLATE "C",
    ALTER COLUMN topic TYPE text COLLATE "C",
    ALTER COLUMN queue TYPE text COLLATE "C";

ALTER TABLE backstop_events
    ALTER COLUMN subjects TYPE text[] COLLATE "C",
    ALTER COLUMN ids TYPE text[] COLLATE "C",
    ALTER COLUMN queues TYPE text[] COLLATE "C",
    ALTER COLUMN kinds TYPE text[] COLLATE "C";
-- +goose StatementBegin
DO $$
BEGIN
    ALTER TABLE backstop_events ALTER COLUMN subjects SET COMPRESSION lz4, ALTER COLUMN queues SET COMPRESSION lz4,
        ALTER COLUMN kinds SET COMPRESSION lz4, ALTER COLUMN ids SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    ALTER TABLE backstop_events ALTER COLUMN subjects SET STORAGE EXTERNAL, ALTER COLUMN queues SET STORAGE EXTERNAL,
        ALTER COLUMN kinds SET STORAGE EXTERNAL, ALTER COLUMN ids SET STORAGE EXTERNAL;
END
$$;
-- +goose StatementEnd

CREATE INDEX backstop_tasks_run ON backstop_tasks ((attributes->>'run_id'), id)
    WHERE attributes ? 'run_id' AND NOT starts_with(id, (attributes->>'run_id') || '.');

CREATE VIEW backstop_pending_retries AS
SELECT id, queue, kind, attempt, max_attempts, run_at, last_error, attributes, created_at
FROM backstop_tasks
WHERE state = 'scheduled' AND attempt > 0;

CREATE VIEW backstop_dead_letters AS
SELECT id, queue, kind, dead_reason, dlq_status, attempt, max_attempts, dead_count, replay_count,
       first_seen, last_seen, last_error, attributes, replayed_from
FROM backstop_tasks
WHERE state = 'dead';

CREATE VIEW backstop_retry_exhausted AS
SELECT * FROM backstop_dead_letters WHERE dead_reason = 'attempts_exhausted';

CREATE VIEW backstop_recent_failures AS
SELECT t.id, t.queue, t.kind, t.state, t.attempt, t.max_attempts, f.failures,
       f.last_failure_at, t.last_error, t.attributes
FROM backstop_tasks t
JOIN (
    SELECT task_id, count(*) AS failures, max(finished_at) AS last_failure_at
    FROM backstop_executions
    WHERE outcome IN ('transient_error', 'permanent_error', 'timeout', 'lease_expired')
      AND finished_at >= now() - interval '24 hours'
    GROUP BY task_id
) f ON f.task_id = t.id;

-- +goose Down
DROP VIEW backstop_recent_failures;
DROP VIEW backstop_retry_exhausted;
DROP VIEW backstop_dead_letters;
DROP VIEW backstop_pending_retries;
DROP INDEX backstop_tasks_run;

ALTER TABLE backstop_tasks
    ALTER COLUMN id TYPE text COLLATE "default",
    ALTER COLUMN queue TYPE text COLLATE "default",
    ALTER COLUMN kind TYPE text COLLATE "default",
    ALTER COLUMN merge_key TYPE text COLLATE "default",
    ALTER COLUMN idempotency_key TYPE text COLLATE "default",
    ALTER COLUMN execution_id TYPE text COLLATE "default",
    ALTER COLUMN worker_id TYPE text COLLATE "default",
    ALTER COLUMN replayed_from TYPE text COLLATE "default";
ALTER TABLE backstop_payloads ALTER COLUMN task_id TYPE text COLLATE "default";
ALTER TABLE backstop_executions
    ALTER COLUMN execution_id TYPE text COLLATE "default",
    ALTER COLUMN task_id TYPE text COLLATE "default",
    ALTER COLUMN worker_id TYPE text COLLATE "default";
ALTER TABLE backstop_execution_logs
    ALTER COLUMN execution_id TYPE text COLLATE "default",
    ALTER COLUMN task_id TYPE text COLLATE "default";
ALTER TABLE backstop_ordering_tasks
    ALTER COLUMN task_id TYPE text COLLATE "default",
    ALTER COLUMN queue TYPE text COLLATE "default",
    ALTER COLUMN okey TYPE text COLLATE "default";
ALTER TABLE backstop_ordering_keys
    ALTER COLUMN queue TYPE text COLLATE "default",
    ALTER COLUMN okey TYPE text COLLATE "default",
    ALTER COLUMN busy_task TYPE text COLLATE "default";
ALTER TABLE backstop_task_counts ALTER COLUMN queue TYPE text COLLATE "default";
ALTER TABLE backstop_task_count_deltas ALTER COLUMN queue TYPE text COLLATE "default";
ALTER TABLE backstop_dlq_group_counts ALTER COLUMN queue TYPE text COLLATE "default";
ALTER TABLE backstop_dlq_group_count_deltas ALTER COLUMN queue TYPE text COLLATE "default";
ALTER TABLE backstop_queues ALTER COLUMN name TYPE text COLLATE "default";
ALTER TABLE backstop_limits
    ALTER COLUMN name TYPE text COLLATE "default",
    ALTER COLUMN queue TYPE text COLLATE "default";
ALTER TABLE backstop_limit_buckets
    ALTER COLUMN limit_name TYPE text COLLATE "default",
    ALTER COLUMN value TYPE text COLLATE "default";
ALTER TABLE backstop_activity
    ALTER COLUMN queue TYPE text COLLATE "default",
    ALTER COLUMN kind TYPE text COLLATE "default";
ALTER TABLE backstop_fair_queues ALTER COLUMN queue TYPE text COLLATE "default";
ALTER TABLE backstop_fair_passes
    ALTER COLUMN queue TYPE text COLLATE "default",
    ALTER COLUMN value TYPE text COLLATE "default";
ALTER TABLE backstop_redrives ALTER COLUMN id TYPE text COLLATE "default";
ALTER TABLE backstop_redrive_items
    ALTER COLUMN redrive_id TYPE text COLLATE "default",
    ALTER COLUMN task_id TYPE text COLLATE "default";
ALTER TABLE backstop_run_steps ALTER COLUMN task_id TYPE text COLLATE "default";
ALTER TABLE backstop_run_wakeups ALTER COLUMN run_id TYPE text COLLATE "default";
ALTER TABLE backstop_schedules
    ALTER COLUMN name TYPE text COLLATE "default",
    ALTER COLUMN last_task_id TYPE text COLLATE "default";
ALTER TABLE backstop_workers ALTER COLUMN id TYPE text COLLATE "default";
ALTER TABLE backstop_tokens
    ALTER COLUMN id TYPE text COLLATE "default",
    ALTER COLUMN name TYPE text COLLATE "default";
ALTER TABLE backstop_secrets ALTER COLUMN name TYPE text COLLATE "default";
ALTER TABLE backstop_leaders ALTER COLUMN name TYPE text COLLATE "default";
ALTER TABLE backstop_event_checkpoints ALTER COLUMN name TYPE text COLLATE "default";
ALTER TABLE backstop_relay_checkpoints
    ALTER COLUMN name TYPE text COLLATE "default",
    ALTER COLUMN stream TYPE text COLLATE "default";
ALTER TABLE backstop_ingest_positions
    ALTER COLUMN group_name TYPE text COLLATE "default",
    ALTER COLUMN topic TYPE text COLLATE "default",
    ALTER COLUMN queue TYPE text COLLATE "default";

ALTER TABLE backstop_events
    ALTER COLUMN subjects TYPE text[] COLLATE "default",
    ALTER COLUMN ids TYPE text[] COLLATE "default",
    ALTER COLUMN queues TYPE text[] COLLATE "default",
    ALTER COLUMN kinds TYPE text[] COLLATE "default";
-- +goose StatementBegin
DO $$
BEGIN
    ALTER TABLE backstop_events ALTER COLUMN subjects SET COMPRESSION lz4, ALTER COLUMN queues SET COMPRESSION lz4,
        ALTER COLUMN kinds SET COMPRESSION lz4, ALTER COLUMN ids SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    ALTER TABLE backstop_events ALTER COLUMN subjects SET STORAGE EXTERNAL, ALTER COLUMN queues SET STORAGE EXTERNAL,
        ALTER COLUMN kinds SET STORAGE EXTERNAL, ALTER COLUMN ids SET STORAGE EXTERNAL;
END
$$;
-- +goose StatementEnd
-- The run index as 00058 left it: without the step tasks only where the
-- database's own collation orders ids byte by byte.
CREATE INDEX backstop_tasks_run ON backstop_tasks ((attributes->>'run_id'), id) WHERE attributes ? 'run_id';
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT coalesce(to_jsonb(d)->>'datlocprovider', 'c') = 'c' AND d.datcollate IN ('C', 'POSIX')
        FROM pg_database d WHERE d.datname = current_database()) THEN
        DROP INDEX backstop_tasks_run;
        CREATE INDEX backstop_tasks_run ON backstop_tasks ((attributes->>'run_id'), id)
            WHERE attributes ? 'run_id' AND NOT starts_with(id, (attributes->>'run_id') || '.');
    END IF;
END
$$;
-- +goose StatementEnd
CREATE VIEW backstop_pending_retries AS
SELECT id, queue, kind, attempt, max_attempts, run_at, last_error, attributes, created_at
FROM backstop_tasks
WHERE state = 'scheduled' AND attempt > 0;

CREATE VIEW backstop_dead_letters AS
SELECT id, queue, kind, dead_reason, dlq_status, attempt, max_attempts, dead_count, replay_count,
       first_seen, last_seen, last_error, attributes, replayed_from
FROM backstop_tasks
WHERE state = 'dead';

CREATE VIEW backstop_retry_exhausted AS
SELECT * FROM backstop_dead_letters WHERE dead_reason = 'attempts_exhausted';

CREATE VIEW backstop_recent_failures AS
SELECT t.id, t.queue, t.kind, t.state, t.attempt, t.max_attempts, f.failures,
       f.last_failure_at, t.last_error, t.attributes
FROM backstop_tasks t
JOIN (
    SELECT task_id, count(*) AS failures, max(finished_at) AS last_failure_at
    FROM backstop_executions
    WHERE outcome IN ('transient_error', 'permanent_error', 'timeout', 'lease_expired')
      AND finished_at >= now() - interval '24 hours'
    GROUP BY task_id
) f ON f.task_id = t.id;
