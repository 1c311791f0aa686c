-- The worker registry and execution logs.
--
-- backstop_workers: one row per worker instance (in-process or remote),
-- written when it registers and touched by its heartbeats. `state` is what
-- the worker said (active, stopping, stopped); readers derive `stale` from
-- last_seen. queues is ",a,b," so one queue matches with strpos.
--
-- backstop_execution_logs: the lines a handler logged during one attempt,
-- bounded per execution by the engine, written in batches off the settle
-- path. `stream` is log, stdout or stderr.

-- +goose Up
CREATE TABLE backstop_workers (
    id         text PRIMARY KEY,
    host       text NOT NULL DEFAULT '',
    pid        integer NOT NULL DEFAULT 0,
    queues     text NOT NULL DEFAULT ',',
    version    text NOT NULL DEFAULT '',
    labels     jsonb NOT NULL DEFAULT '{}',
    remote     boolean NOT NULL DEFAULT false,
    state      text NOT NULL,
    started_at timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    stopped_at timestamptz
);

-- A worker's recent executions (GET /v1/workers/{id}).
CREATE INDEX backstop_executions_worker ON backstop_executions (worker_id, started_at);

CREATE TABLE backstop_execution_logs (
    execution_id text NOT NULL,
    seq          integer NOT NULL,
    task_id      text NOT NULL,
    at           timestamptz NOT NULL,
    stream       text NOT NULL,
    line         text NOT NULL,
    PRIMARY KEY (execution_id, seq)
);
CREATE INDEX backstop_execution_logs_task ON backstop_execution_logs (task_id);

-- +goose Down
DROP TABLE backstop_execution_logs;
DROP INDEX backstop_executions_worker;
DROP TABLE backstop_workers;
