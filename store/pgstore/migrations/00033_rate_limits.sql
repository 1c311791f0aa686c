-- Rate limits: a limit is a concurrency limit (concurrency > 0) or a rate
-- limit (rate > 0: starts per second, with bursts of burst). Each budget of
-- a rate limit is a token bucket, one row updated by the claims that take
-- its tokens (no row: a full bucket), only while they hold the lock on the
-- queue's limit rows: the lock order is the limits', then their buckets.

-- +goose Up
ALTER TABLE backstop_limits DROP CONSTRAINT backstop_limits_concurrency_check;
ALTER TABLE backstop_limits ALTER COLUMN concurrency SET DEFAULT 0,
    ADD COLUMN rate double precision NOT NULL DEFAULT 0 CHECK (rate >= 0),
    ADD COLUMN burst integer NOT NULL DEFAULT 0 CHECK (burst >= 0),
    ADD CONSTRAINT backstop_limits_concurrency_check CHECK (concurrency >= 0),
    ADD CONSTRAINT backstop_limits_one_kind CHECK ((concurrency > 0) <> (rate > 0)),
    ADD CONSTRAINT backstop_limits_burst CHECK ((rate > 0) = (burst > 0));
CREATE TABLE backstop_limit_buckets (
    limit_name text NOT NULL,
    value      text NOT NULL,
    tokens     double precision NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (limit_name, value)
);

-- +goose Down
DROP TABLE backstop_limit_buckets;
DELETE FROM backstop_limits WHERE rate > 0;
ALTER TABLE backstop_limits DROP CONSTRAINT backstop_limits_burst,
    DROP CONSTRAINT backstop_limits_one_kind,
    DROP CONSTRAINT backstop_limits_concurrency_check,
    DROP COLUMN burst, DROP COLUMN rate,
    ALTER COLUMN concurrency DROP DEFAULT,
    ADD CONSTRAINT backstop_limits_concurrency_check CHECK (concurrency > 0);
