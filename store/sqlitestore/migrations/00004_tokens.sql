-- API bearer tokens: only the SHA-256 hash of the secret is stored.
-- Times are INTEGER microseconds since the Unix epoch (UTC).

-- +goose Up
CREATE TABLE backstop_tokens (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    hash          BLOB NOT NULL UNIQUE,
    created_at    INTEGER NOT NULL,
    revoked_at    INTEGER,
    last_used_at  INTEGER
);
-- A name identifies one live token; revoked tokens keep theirs for history.
CREATE UNIQUE INDEX backstop_tokens_live_name ON backstop_tokens (name) WHERE revoked_at IS NULL;

-- +goose Down
DROP TABLE backstop_tokens;
