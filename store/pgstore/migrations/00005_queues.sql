-- Paused queues: a row means the queue is paused; Claim skips it.

-- +goose Up
CREATE TABLE backstop_queues (
    name       text PRIMARY KEY,
    paused_at  timestamptz NOT NULL,
    paused_by  text NOT NULL
);

-- +goose Down
DROP TABLE backstop_queues;
