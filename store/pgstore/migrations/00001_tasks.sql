-- The same tables, columns and indexes as the SQLite driver's 00001_tasks.sql,
-- in PostgreSQL types. Every object is created unqualified, in the first
-- schema of the connection's search_path.

-- +goose Up
CREATE TABLE backstop_tasks (
    id                  text PRIMARY KEY,
    queue               text NOT NULL,
    kind                text NOT NULL,
    state               text NOT NULL,
    priority            integer NOT NULL DEFAULT 0,
    attempt             integer NOT NULL DEFAULT 0,
    max_attempts        integer NOT NULL,
    -- json, not jsonb: it keeps the payload's bytes exactly. NULL when spilled
    -- to backstop_payloads.
    payload             json,
    payload_size        integer NOT NULL DEFAULT 0,
    payload_spilled     boolean NOT NULL DEFAULT false,
    attributes          jsonb,                -- object of strings, or NULL
    run_at              timestamptz NOT NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    timeout_us          bigint NOT NULL DEFAULT 0,
    deadline            timestamptz,
    retry_policy        jsonb,                -- RetryPolicy override, or NULL
    idempotency_key     text,
    merge_key           text,
    merge_count         integer NOT NULL DEFAULT 0,
    progress_total      integer NOT NULL DEFAULT 0,
    progress_completed  integer NOT NULL DEFAULT 0,
    complexity          double precision NOT NULL DEFAULT 0,
    trace_parent        text,
    last_error          text,
    -- current or last lease
    worker_id           text,
    execution_id        text,
    attempted_at        timestamptz,
    lease_expires_at    timestamptz,
    cancel_requested_at timestamptz,
    finalized_at        timestamptz,
    -- dead-letter record (kept across replays; replay keeps the id)
    dead_reason         text,
    first_seen          timestamptz,
    last_seen           timestamptz,
    dead_count          integer NOT NULL DEFAULT 0,
    replay_count        integer NOT NULL DEFAULT 0,
    dlq_status          text,                 -- open | replayed | discarded | resolved
    replayed_from       text
);

-- Claim path: only pending rows are in it.
CREATE INDEX backstop_tasks_claim ON backstop_tasks (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX backstop_tasks_scheduled ON backstop_tasks (run_at) WHERE state = 'scheduled';
CREATE INDEX backstop_tasks_lease ON backstop_tasks (lease_expires_at) WHERE state = 'running';
CREATE INDEX backstop_tasks_deadline ON backstop_tasks (deadline)
    WHERE deadline IS NOT NULL AND state IN ('scheduled', 'pending');
-- At most one live task per idempotency key.
CREATE UNIQUE INDEX backstop_tasks_idempotency ON backstop_tasks (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running', 'buffered');
-- At most one waiting task per (kind, merge key): later enqueues merge into it.
CREATE UNIQUE INDEX backstop_tasks_merge ON backstop_tasks (kind, merge_key)
    WHERE merge_key IS NOT NULL AND state IN ('scheduled', 'pending');
CREATE INDEX backstop_tasks_dead ON backstop_tasks (last_seen) WHERE state = 'dead';

CREATE TABLE backstop_executions (
    execution_id text PRIMARY KEY,
    task_id      text NOT NULL,
    attempt      integer NOT NULL,
    worker_id    text NOT NULL,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    outcome      text NOT NULL,
    error        text,
    error_detail text
);
CREATE INDEX backstop_executions_task ON backstop_executions (task_id, started_at);

-- Payloads above the inline limit live here so the hot table stays small.
CREATE TABLE backstop_payloads (
    task_id text PRIMARY KEY,
    data    bytea NOT NULL
);

-- +goose Down
DROP TABLE backstop_payloads;
DROP TABLE backstop_executions;
DROP TABLE backstop_tasks;
