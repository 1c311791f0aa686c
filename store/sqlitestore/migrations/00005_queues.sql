-- Paused queues: a row means the queue is paused; Claim skips it.
-- Times are INTEGER microseconds since the Unix epoch (UTC).

-- +goose Up
CREATE TABLE backstop_queues (
    name       TEXT PRIMARY KEY,
    paused_at  INTEGER NOT NULL,
    paused_by  TEXT NOT NULL
);

-- +goose Down
DROP TABLE backstop_queues;
