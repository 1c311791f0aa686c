-- The ingesters' reports (docs/brokers.md, "Ingest"): per consumer group
-- and topic (or subject), the messages behind and the broker timestamp the
-- lag in time is measured from, who reported, the last error. The same
-- table as the SQLite driver's 00033_ingest_positions.sql.

-- +goose Up
CREATE TABLE backstop_ingest_positions (
    group_name    text NOT NULL,
    topic         text NOT NULL,
    queue         text NOT NULL,
    holder        text NOT NULL DEFAULT '',
    lag_messages  bigint NOT NULL DEFAULT 0,
    lag_from      timestamptz,
    updated_at    timestamptz NOT NULL,
    last_error    text NOT NULL DEFAULT '',
    last_error_at timestamptz,
    PRIMARY KEY (group_name, topic)
);

-- +goose Down
DROP TABLE backstop_ingest_positions;
