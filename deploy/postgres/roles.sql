-- Least-privilege roles for Backstop on PostgreSQL (docs/postgres-roles.md).
--
--   psql -v schema=backstop -f deploy/postgres/roles.sql
--
-- Run it as the owner of the schema, after `backstop migrate` (which that
-- owner runs: none of these roles may change the schema), and again after
-- an upgrade that adds tables. It creates three NOLOGIN group roles; grant
-- them to the login roles your services use:
--
--   CREATE ROLE billing_api LOGIN PASSWORD '…' IN ROLE backstop_producer;
--
-- Tables and columns follow the migrations in store/pgstore/migrations.

\set ON_ERROR_STOP on

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'backstop_producer') THEN
        CREATE ROLE backstop_producer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'backstop_worker') THEN
        CREATE ROLE backstop_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'backstop_admin') THEN
        CREATE ROLE backstop_admin NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA :"schema" TO backstop_producer, backstop_worker, backstop_admin;
-- Every process checks the schema version when it opens the store.
GRANT SELECT ON :"schema".backstop_schema_version TO backstop_producer, backstop_worker;

-- producer: enqueue only. INSERT a task and its spilled payload; SELECT for
-- idempotency keys, id conflicts and merge candidates; UPDATE of the merge
-- columns only: a merge rewrites the waiting task's payload, never its
-- state; it cannot claim (no executions, no leases), settle or delete.
-- DELETE of a payload that a merge moved inline. A debounced merge also
-- moves the waiting task's run time (so its state, between scheduled and
-- pending) and stores the debounce's settings (docs/keys.md): through two
-- functions the migrations create, which run as their owner and write only
-- a scheduled or pending task holding the given kind and debounce key. An
-- enqueue with a window (--unique-for) opens it through a third, on a task
-- holding that idempotency key that has none yet and never ran.
GRANT SELECT, INSERT ON :"schema".backstop_tasks TO backstop_producer;
GRANT UPDATE (payload, payload_size, payload_spilled, merge_count, updated_at)
    ON :"schema".backstop_tasks TO backstop_producer;
GRANT EXECUTE ON FUNCTION
    :"schema".backstop_debounce_merge(text, text, text, json, integer, boolean,
        timestamptz, timestamptz, bigint, timestamptz),
    :"schema".backstop_debounce_settings(text, text, text, bigint, timestamptz),
    :"schema".backstop_unique_window(text, text, timestamptz)
    TO backstop_producer, backstop_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".backstop_payloads TO backstop_producer;
GRANT SELECT, INSERT ON :"schema".backstop_events TO backstop_producer;
GRANT USAGE ON SEQUENCE :"schema".backstop_events_seq_seq TO backstop_producer;
-- An ordered task's ordering row (docs/ordering.md).
GRANT SELECT, INSERT ON :"schema".backstop_ordering_tasks TO backstop_producer;

-- worker: claim, heartbeat, settle, cancel and maintenance (lease expiry,
-- promotion, deadlines, the leadership lease). It reads payloads and
-- records attempts, but deletes nothing but its own leadership row:
-- retention and purges need the admin role.
GRANT SELECT, UPDATE ON :"schema".backstop_tasks TO backstop_worker;
GRANT SELECT, INSERT ON :"schema".backstop_executions TO backstop_worker;
GRANT SELECT ON :"schema".backstop_payloads TO backstop_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".backstop_leaders TO backstop_worker;
-- Claims skip paused queues; pausing and resuming is the admin role's.
GRANT SELECT ON :"schema".backstop_queues TO backstop_worker;
-- Claims of a queue with limits lock its limit rows (FOR UPDATE needs
-- UPDATE) and take the tokens of its rate limits' buckets; setting and
-- removing limits is the admin role's.
GRANT SELECT, UPDATE ON :"schema".backstop_limits TO backstop_worker;
GRANT SELECT, INSERT, UPDATE ON :"schema".backstop_limit_buckets TO backstop_worker;
-- Claims of a fair queue lock its fairness row (FOR UPDATE needs UPDATE)
-- and keep its values' passes; making a queue fair is the admin role's.
GRANT SELECT, UPDATE ON :"schema".backstop_fair_queues TO backstop_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".backstop_fair_passes TO backstop_worker;
GRANT SELECT, INSERT ON :"schema".backstop_events TO backstop_worker;
GRANT USAGE ON SEQUENCE :"schema".backstop_events_seq_seq TO backstop_worker;
-- A claim numbers its execution ids from a sequence (pgstore: execIDs).
GRANT USAGE ON SEQUENCE :"schema".backstop_execution_ids TO backstop_worker;
GRANT SELECT, INSERT, UPDATE ON :"schema".backstop_event_checkpoints TO backstop_worker;
-- The event-log relay's checkpoints (docs/brokers.md): the relay runs as a worker.
GRANT SELECT, INSERT, UPDATE ON :"schema".backstop_relay_checkpoints TO backstop_worker;
-- The ingesters' reports (docs/brokers.md, "Ingest"): an ingester runs as a worker
-- (it stands in its topic's election) or a producer.
GRANT SELECT, INSERT, UPDATE ON :"schema".backstop_ingest_positions TO backstop_worker, backstop_producer;
-- Ordering admission (docs/ordering.md): it updates ordering rows and key
-- states, and deletes the key states it forgets.
GRANT SELECT, UPDATE ON :"schema".backstop_ordering_tasks TO backstop_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".backstop_ordering_keys TO backstop_worker;
GRANT SELECT ON :"schema".backstop_pending_retries, :"schema".backstop_dead_letters,
    :"schema".backstop_retry_exhausted, :"schema".backstop_recent_failures TO backstop_worker;
-- The worker registry (a worker registers, is seen, stops) and the
-- executions' logs (lines appended, usage read); their deletion is retention's.
GRANT SELECT, INSERT, UPDATE ON :"schema".backstop_workers TO backstop_worker;
GRANT SELECT, INSERT ON :"schema".backstop_execution_logs TO backstop_worker;
-- The key of remote workers' lease tokens (`serve` claims for them): stored
-- once on first use by whichever process comes first, then only read.
GRANT SELECT, INSERT ON :"schema".backstop_secrets TO backstop_worker;
-- Workflows (store/workflows.go): a producer registers definitions (new
-- versions are inserted, never changed) and starts runs in its own
-- transaction (the run and its first step rows); a worker that settles a
-- step reads the definition, locks and updates the run (SELECT ... FOR
-- UPDATE needs UPDATE) and writes step rows. Neither deletes them.
GRANT SELECT, INSERT ON :"schema".backstop_workflows TO backstop_producer;
GRANT SELECT, INSERT ON :"schema".backstop_runs TO backstop_producer;
GRANT SELECT, INSERT, UPDATE ON :"schema".backstop_run_steps TO backstop_producer, backstop_worker;
GRANT SELECT ON :"schema".backstop_workflows TO backstop_worker;
GRANT SELECT, UPDATE ON :"schema".backstop_runs TO backstop_worker;
-- A run's wake-up (a for_each budget's deadline) is written with its plan,
-- by whichever role writes the plan, and removed by the maintenance leader
-- when it has planned the run again.
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".backstop_run_wakeups TO backstop_producer, backstop_worker;
-- Periodic schedules (store/schedules.go): `serve` and `work` store the
-- configuration's schedules at start, and the maintenance leader advances
-- them as it enqueues their ticks (which takes the producer role's INSERT on
-- backstop_tasks too). Adding and removing them through the API is the
-- admin role's.
GRANT SELECT, INSERT, UPDATE ON :"schema".backstop_schedules TO backstop_worker;
-- The activity rollup (store/activity.go): the maintenance leader adds the
-- finished work to its rows and moves its watermark in one transaction, and
-- deletes the rows past their keep.
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".backstop_activity, :"schema".backstop_activity_rollup TO backstop_worker;
-- The kept task counts (store/counts.go): every write of tasks appends its
-- change to the deltas through a trigger that runs as its owner (no grant
-- needed to write tasks), but the claim and the success settle, which append
-- their own batch's as the worker, and a batch enqueue written by COPY, which
-- appends its own as the producer; the maintenance leader folds the deltas
-- into the counts and corrects them from a count of the tasks.
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".backstop_task_counts, :"schema".backstop_task_count_deltas TO backstop_worker;
GRANT INSERT ON :"schema".backstop_task_count_deltas TO backstop_producer;
-- The dead letters' groups are kept the same way (store/pgstore migration
-- 00062), folded and corrected with the task counts.
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".backstop_dlq_group_counts, :"schema".backstop_dlq_group_count_deltas TO backstop_worker;

-- admin: everything on Backstop's tables, views and sequences: dead-letter
-- replay, redrive, discard, resolve, purge and export, retention, tokens.
GRANT ALL ON ALL TABLES IN SCHEMA :"schema" TO backstop_admin;
GRANT ALL ON ALL SEQUENCES IN SCHEMA :"schema" TO backstop_admin;
-- Tables later migrations create (as the role running this file) too.
ALTER DEFAULT PRIVILEGES IN SCHEMA :"schema" GRANT ALL ON TABLES TO backstop_admin;
ALTER DEFAULT PRIVILEGES IN SCHEMA :"schema" GRANT ALL ON SEQUENCES TO backstop_admin;
