-- Dead-letter operations: the history (events) and durable bulk redrives.
-- The same tables as the SQLite driver's 00002_dlq.sql.

-- +goose Up
-- A task's history in DESIGN.md's event envelope. seq is the global order.
CREATE TABLE backstop_events (
    seq        bigserial PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    time       timestamptz NOT NULL,
    type       text NOT NULL,
    subject    text NOT NULL,        -- task id
    queue      text NOT NULL DEFAULT '',
    kind       text NOT NULL DEFAULT '',
    attributes jsonb,
    actor      text NOT NULL DEFAULT '',
    body       jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX backstop_events_subject ON backstop_events (subject, seq);

-- Open dead letters in id order: the redrive cursor.
CREATE INDEX backstop_tasks_dlq_open ON backstop_tasks (id) WHERE state = 'dead' AND dlq_status = 'open';

CREATE TABLE backstop_redrives (
    id          text PRIMARY KEY,
    filter_key  text NOT NULL,
    filter      jsonb NOT NULL,
    snapshot    timestamptz NOT NULL,
    cursor      text NOT NULL DEFAULT '',
    replayed    integer NOT NULL DEFAULT 0,
    failed      integer NOT NULL DEFAULT 0,
    status      text NOT NULL,       -- running | done | interrupted
    started_at  timestamptz NOT NULL,
    finished_at timestamptz
);
CREATE INDEX backstop_redrives_running ON backstop_redrives (filter_key) WHERE status = 'running';

-- +goose Down
DROP TABLE backstop_redrives;
DROP INDEX backstop_tasks_dlq_open;
DROP TABLE backstop_events;
