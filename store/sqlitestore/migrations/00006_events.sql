-- The event log (docs/events.md): subscriber checkpoints. SQLite has one
-- writer at a time, so seq order is commit order and the cursor is seq.

-- +goose Up
CREATE TABLE backstop_event_checkpoints (
    name       TEXT PRIMARY KEY,
    cursor     TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE backstop_event_checkpoints;
