-- The activity rollup (store/activity.go, internal/activity): the work
-- finished per bucket × queue × kind, five-minute buckets (width_s 300,
-- kept two days) and hourly ones (3600, kept eight days), with the
-- latency histograms as comma-separated counts per bucket of
-- internal/activity's bounds. The maintenance leader adds to them from the
-- work finished since rolled_up_to (one row) and moves it in the same
-- transaction. Times are microseconds since the epoch.

-- +goose Up
CREATE TABLE backstop_activity (
	width_s   INTEGER NOT NULL,
	bucket    INTEGER NOT NULL,
	queue     TEXT NOT NULL,
	kind      TEXT NOT NULL,
	succeeded INTEGER NOT NULL DEFAULT 0,
	failed    INTEGER NOT NULL DEFAULT 0,
	retried   INTEGER NOT NULL DEFAULT 0,
	dead      INTEGER NOT NULL DEFAULT 0,
	wait_hist TEXT NOT NULL DEFAULT '',
	run_hist  TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (width_s, bucket, queue, kind)
);
CREATE TABLE backstop_activity_rollup (
	id           INTEGER PRIMARY KEY CHECK (id = 1),
	rolled_up_to INTEGER NOT NULL
);

-- +goose Down
DROP TABLE backstop_activity_rollup;
DROP TABLE backstop_activity;
