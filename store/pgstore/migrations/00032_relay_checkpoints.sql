-- The event-log relay's durable positions (docs/brokers.md): per named
-- checkpoint and stream, the cursor of the last event the sink
-- acknowledged, its counts and last error. The same table as the SQLite
-- driver's 00023_relay_checkpoints.sql.

-- +goose Up
CREATE TABLE backstop_relay_checkpoints (
    name          text NOT NULL,
    stream        text NOT NULL,
    sink          text NOT NULL,
    cursor        text NOT NULL,
    updated_at    timestamptz NOT NULL,
    published     bigint NOT NULL DEFAULT 0,
    duplicates    bigint NOT NULL DEFAULT 0,
    last_error    text NOT NULL DEFAULT '',
    last_error_at timestamptz,
    PRIMARY KEY (name, stream)
);

-- +goose Down
DROP TABLE backstop_relay_checkpoints;
