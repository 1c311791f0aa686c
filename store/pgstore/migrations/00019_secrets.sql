-- Secrets every process sharing the database agrees on (store/secrets.go):
-- the key that signs remote workers' lease tokens. Written once, never
-- updated.

-- +goose Up
CREATE TABLE backstop_secrets (
    name       text PRIMARY KEY,
    value      bytea NOT NULL,
    created_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE backstop_secrets;
