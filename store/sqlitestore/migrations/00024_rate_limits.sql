-- Rate limits: a limit is a concurrency limit (concurrency > 0) or a rate
-- limit (rate > 0: starts per second, with bursts of burst). Each budget of
-- a rate limit is a token bucket, one row updated by the claims that take
-- its tokens (no row: a full bucket). The limits table is rebuilt because
-- SQLite cannot change a CHECK. Times are INTEGER microseconds since the
-- Unix epoch.

-- +goose Up
CREATE TABLE backstop_limits_new (
    name        TEXT PRIMARY KEY,
    queue       TEXT NOT NULL,
    kind        TEXT NOT NULL DEFAULT '',
    per         TEXT NOT NULL DEFAULT '',
    concurrency INTEGER NOT NULL DEFAULT 0 CHECK (concurrency >= 0),
    rate        REAL NOT NULL DEFAULT 0 CHECK (rate >= 0),
    burst       INTEGER NOT NULL DEFAULT 0 CHECK (burst >= 0),
    created_at  INTEGER NOT NULL,
    CHECK ((concurrency > 0) <> (rate > 0)),
    CHECK ((rate > 0) = (burst > 0))
);
INSERT INTO backstop_limits_new (name, queue, kind, per, concurrency, created_at)
    SELECT name, queue, kind, per, concurrency, created_at FROM backstop_limits;
DROP TABLE backstop_limits;
ALTER TABLE backstop_limits_new RENAME TO backstop_limits;
CREATE INDEX backstop_limits_queue ON backstop_limits (queue);
CREATE TABLE backstop_limit_buckets (
    limit_name TEXT NOT NULL,
    value      TEXT NOT NULL,
    tokens     REAL NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (limit_name, value)
);

-- +goose Down
DROP TABLE backstop_limit_buckets;
DELETE FROM backstop_limits WHERE rate > 0;
CREATE TABLE backstop_limits_old (
    name        TEXT PRIMARY KEY,
    queue       TEXT NOT NULL,
    kind        TEXT NOT NULL DEFAULT '',
    per         TEXT NOT NULL DEFAULT '',
    concurrency INTEGER NOT NULL CHECK (concurrency > 0),
    created_at  INTEGER NOT NULL
);
INSERT INTO backstop_limits_old SELECT name, queue, kind, per, concurrency, created_at FROM backstop_limits;
DROP TABLE backstop_limits;
ALTER TABLE backstop_limits_old RENAME TO backstop_limits;
CREATE INDEX backstop_limits_queue ON backstop_limits (queue);
