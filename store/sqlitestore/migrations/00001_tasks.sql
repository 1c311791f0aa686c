-- Times are INTEGER microseconds since the Unix epoch (UTC).

-- +goose Up
CREATE TABLE backstop_tasks (
    id                  TEXT PRIMARY KEY,
    queue               TEXT NOT NULL,
    kind                TEXT NOT NULL,
    state               TEXT NOT NULL,
    priority            INTEGER NOT NULL DEFAULT 0,
    attempt             INTEGER NOT NULL DEFAULT 0,
    max_attempts        INTEGER NOT NULL,
    payload             BLOB,                 -- NULL when spilled to backstop_payloads
    payload_size        INTEGER NOT NULL DEFAULT 0,
    payload_spilled     INTEGER NOT NULL DEFAULT 0,
    attributes          TEXT,                 -- JSON object of strings, or NULL
    run_at              INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    timeout_us          INTEGER NOT NULL DEFAULT 0,
    deadline            INTEGER,
    retry_policy        TEXT,                 -- JSON RetryPolicy override, or NULL
    idempotency_key     TEXT,
    merge_key           TEXT,
    merge_count         INTEGER NOT NULL DEFAULT 0,
    progress_total      INTEGER NOT NULL DEFAULT 0,
    progress_completed  INTEGER NOT NULL DEFAULT 0,
    complexity          REAL NOT NULL DEFAULT 0,
    trace_parent        TEXT,
    last_error          TEXT,
    -- current or last lease
    worker_id           TEXT,
    execution_id        TEXT,
    attempted_at        INTEGER,
    lease_expires_at    INTEGER,
    cancel_requested_at INTEGER,
    finalized_at        INTEGER,
    -- dead-letter record (kept across replays; replay keeps the id)
    dead_reason         TEXT,
    first_seen          INTEGER,
    last_seen           INTEGER,
    dead_count          INTEGER NOT NULL DEFAULT 0,
    replay_count        INTEGER NOT NULL DEFAULT 0,
    dlq_status          TEXT,                 -- open | replayed | discarded | resolved
    replayed_from       TEXT
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

-- Keyed by task first: a task's attempts sit together, and inserts follow
-- the (time-ordered) task ids instead of scattering random execution ids.
CREATE TABLE backstop_executions (
    task_id      TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    worker_id    TEXT NOT NULL,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER,
    outcome      TEXT NOT NULL,
    error        TEXT,
    error_detail TEXT,
    PRIMARY KEY (task_id, execution_id)
) WITHOUT ROWID;

-- Payloads above the inline limit live here so the hot table stays small.
CREATE TABLE backstop_payloads (
    task_id TEXT PRIMARY KEY,
    data    BLOB NOT NULL
);

-- +goose Down
DROP TABLE backstop_payloads;
DROP TABLE backstop_executions;
DROP TABLE backstop_tasks;
