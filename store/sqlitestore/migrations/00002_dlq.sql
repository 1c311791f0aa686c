-- Dead-letter operations: the history (events) and durable bulk redrives.

-- +goose Up
-- A task's history in DESIGN.md's event envelope. seq is the global order.
CREATE TABLE backstop_events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    time       INTEGER NOT NULL,
    type       TEXT NOT NULL,
    subject    TEXT NOT NULL,        -- task id
    queue      TEXT NOT NULL DEFAULT '',
    kind       TEXT NOT NULL DEFAULT '',
    attributes TEXT,                 -- JSON object of strings, or NULL
    actor      TEXT NOT NULL DEFAULT '',
    body       TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX backstop_events_subject ON backstop_events (subject, seq);

-- Open dead letters in id order: the redrive and export cursor.
CREATE INDEX backstop_tasks_dlq_open ON backstop_tasks (id) WHERE state = 'dead' AND dlq_status = 'open';

CREATE TABLE backstop_redrives (
    id          TEXT PRIMARY KEY,
    filter_key  TEXT NOT NULL,
    filter      TEXT NOT NULL,
    snapshot    INTEGER NOT NULL,
    cursor      TEXT NOT NULL DEFAULT '',
    replayed    INTEGER NOT NULL DEFAULT 0,
    failed      INTEGER NOT NULL DEFAULT 0,
    status      TEXT NOT NULL,       -- running | done | interrupted
    started_at  INTEGER NOT NULL,
    finished_at INTEGER
);
CREATE INDEX backstop_redrives_running ON backstop_redrives (filter_key) WHERE status = 'running';

-- +goose Down
DROP TABLE backstop_redrives;
DROP INDEX backstop_tasks_dlq_open;
DROP TABLE backstop_events;
