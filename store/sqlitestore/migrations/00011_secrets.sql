-- Secrets every process sharing the database agrees on (store/secrets.go):
-- the key that signs remote workers' lease tokens. Written once, never
-- updated. Times are INTEGER microseconds since the Unix epoch (UTC).

-- +goose Up
CREATE TABLE backstop_secrets (
    name       TEXT PRIMARY KEY,
    value      BLOB NOT NULL,
    created_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE backstop_secrets;
