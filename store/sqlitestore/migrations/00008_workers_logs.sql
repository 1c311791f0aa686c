-- The worker registry and execution logs (see the Postgres migration for
-- the model). Times are INTEGER microseconds since the Unix epoch (UTC).

-- +goose Up
CREATE TABLE backstop_workers (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL DEFAULT '',
    pid        INTEGER NOT NULL DEFAULT 0,
    queues     TEXT NOT NULL DEFAULT ',',
    version    TEXT NOT NULL DEFAULT '',
    labels     TEXT NOT NULL DEFAULT '{}',
    remote     INTEGER NOT NULL DEFAULT 0,
    state      TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL,
    stopped_at INTEGER
);

CREATE INDEX backstop_executions_worker ON backstop_executions (worker_id, started_at);

CREATE TABLE backstop_execution_logs (
    execution_id TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    task_id      TEXT NOT NULL,
    at           INTEGER NOT NULL,
    stream       TEXT NOT NULL,
    line         TEXT NOT NULL,
    PRIMARY KEY (execution_id, seq)
) WITHOUT ROWID;
CREATE INDEX backstop_execution_logs_task ON backstop_execution_logs (task_id);

-- +goose Down
DROP TABLE backstop_execution_logs;
DROP INDEX backstop_executions_worker;
DROP TABLE backstop_workers;
