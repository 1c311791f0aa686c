-- The event-log relay's durable positions (docs/brokers.md): per named
-- checkpoint and stream, the cursor of the last event the sink
-- acknowledged, its counts and last error. Times are INTEGER microseconds
-- since the Unix epoch.

-- +goose Up
CREATE TABLE backstop_relay_checkpoints (
    name          TEXT NOT NULL,
    stream        TEXT NOT NULL,
    sink          TEXT NOT NULL,
    cursor        TEXT NOT NULL,
    updated_at    INTEGER NOT NULL,
    published     INTEGER NOT NULL DEFAULT 0,
    duplicates    INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT NOT NULL DEFAULT '',
    last_error_at INTEGER,
    PRIMARY KEY (name, stream)
);

-- +goose Down
DROP TABLE backstop_relay_checkpoints;
