-- A workflow run that must be planned again at a time even if nothing of
-- it settles (a for_each budget running out while its items wait) has a
-- row here; the maintenance leader advances the runs whose time came. A
-- run deleted by retention leaves its row to the next round, which
-- removes it.

-- +goose Up
CREATE TABLE backstop_run_wakeups (
	run_id  text PRIMARY KEY,
	wake_at timestamptz NOT NULL
);
CREATE INDEX backstop_run_wakeups_at ON backstop_run_wakeups (wake_at);

-- +goose Down
DROP TABLE backstop_run_wakeups;
