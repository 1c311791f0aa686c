-- The activity rollup (store/activity.go, internal/activity): the work
-- finished per bucket × queue × kind, five-minute buckets (width_s 300,
-- kept two days) and hourly ones (3600, kept eight days), with the
-- latency histograms as comma-separated counts per bucket of
-- internal/activity's bounds. The maintenance leader adds to them from the
-- work finished since rolled_up_to (one row) and moves it in the same
-- transaction.

-- +goose Up
CREATE TABLE backstop_activity (
	width_s   integer NOT NULL,
	bucket    timestamptz NOT NULL,
	queue     text NOT NULL,
	kind      text NOT NULL,
	succeeded bigint NOT NULL DEFAULT 0,
	failed    bigint NOT NULL DEFAULT 0,
	retried   bigint NOT NULL DEFAULT 0,
	dead      bigint NOT NULL DEFAULT 0,
	wait_hist text NOT NULL DEFAULT '',
	run_hist  text NOT NULL DEFAULT '',
	PRIMARY KEY (width_s, bucket, queue, kind)
);
CREATE TABLE backstop_activity_rollup (
	id           integer PRIMARY KEY CHECK (id = 1),
	rolled_up_to timestamptz NOT NULL
);

-- +goose Down
DROP TABLE backstop_activity_rollup;
DROP TABLE backstop_activity;
