-- The ingesters' reports (docs/brokers.md, "Ingest"): per consumer group
-- and topic (or subject), the messages behind and the broker timestamp the
-- lag in time is measured from, who reported, the last error. Times are
-- INTEGER microseconds since the Unix epoch.

-- +goose Up
CREATE TABLE backstop_ingest_positions (
    group_name    TEXT NOT NULL,
    topic         TEXT NOT NULL,
    queue         TEXT NOT NULL,
    holder        TEXT NOT NULL DEFAULT '',
    lag_messages  INTEGER NOT NULL DEFAULT 0,
    lag_from      INTEGER,
    updated_at    INTEGER NOT NULL,
    last_error    TEXT NOT NULL DEFAULT '',
    last_error_at INTEGER,
    PRIMARY KEY (group_name, topic)
);

-- +goose Down
DROP TABLE backstop_ingest_positions;
