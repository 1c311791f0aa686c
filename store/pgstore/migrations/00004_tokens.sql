-- API bearer tokens: only the SHA-256 hash of the secret is stored.

-- +goose Up
CREATE TABLE backstop_tokens (
    id            text PRIMARY KEY,
    name          text NOT NULL,
    role          text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    hash          bytea NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL,
    revoked_at    timestamptz,
    last_used_at  timestamptz
);
-- A name identifies one live token; revoked tokens keep theirs for history.
CREATE UNIQUE INDEX backstop_tokens_live_name ON backstop_tokens (name) WHERE revoked_at IS NULL;

-- +goose Down
DROP TABLE backstop_tokens;
