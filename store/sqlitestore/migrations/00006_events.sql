-- The event log (docs/events.md): subscriber checkpoints, and the events
-- table without its unique index on id (ids are fresh UUIDv7s; every index
-- costs each of the engine's writes). SQLite has one writer at a time, so
-- seq order is commit order and the cursor is seq.

-- +goose Up
CREATE TABLE backstop_events_new (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL,
    time       INTEGER NOT NULL,
    type       TEXT NOT NULL,
    subject    TEXT NOT NULL,        -- task id (worker id for worker.* events)
    queue      TEXT NOT NULL DEFAULT '',
    kind       TEXT NOT NULL DEFAULT '',
    attributes TEXT,                 -- JSON object of strings, or NULL
    actor      TEXT NOT NULL DEFAULT '',
    body       TEXT NOT NULL DEFAULT '{}'
);
INSERT INTO backstop_events_new (seq, id, time, type, subject, queue, kind, attributes, actor, body)
    SELECT seq, id, time, type, subject, queue, kind, attributes, actor, body FROM backstop_events;
-- Keep the sequence where it was (AUTOINCREMENT never reuses a number, even
-- of deleted events: a cursor past them must stay valid).
DELETE FROM sqlite_sequence WHERE name = 'backstop_events_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'backstop_events_new', seq FROM sqlite_sequence WHERE name = 'backstop_events';
DROP TABLE backstop_events;
ALTER TABLE backstop_events_new RENAME TO backstop_events;
CREATE INDEX backstop_events_subject ON backstop_events (subject, seq);

CREATE TABLE backstop_event_checkpoints (
    name       TEXT PRIMARY KEY,
    cursor     TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE backstop_event_checkpoints;
CREATE UNIQUE INDEX backstop_events_id ON backstop_events (id);
