-- Periodic tasks: one row per schedule, its timing (every_ms, or cron in
-- tz), its missed-tick policy, the task a tick enqueues (task, JSON), and
-- where it stands. The leader's round advances next_run_at in the same
-- transaction as it enqueues the tick's task, only while next_run_at is
-- still the tick it read: two leaders never both enqueue a tick.
-- Times are microseconds since the epoch.

-- +goose Up
CREATE TABLE backstop_schedules (
	name             TEXT PRIMARY KEY,
	every_ms         INTEGER NOT NULL DEFAULT 0,
	cron             TEXT NOT NULL DEFAULT '',
	tz               TEXT NOT NULL DEFAULT '',
	missed           TEXT NOT NULL DEFAULT 'skip',
	task             TEXT NOT NULL,
	paused           INTEGER NOT NULL DEFAULT 0,
	next_run_at      INTEGER NOT NULL,
	last_run_at      INTEGER,
	last_outcome     TEXT NOT NULL DEFAULT '',
	last_task_id     TEXT NOT NULL DEFAULT '',
	last_enqueued_at INTEGER,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL
);
CREATE INDEX backstop_schedules_next ON backstop_schedules (next_run_at) WHERE NOT paused;

-- +goose Down
DROP TABLE backstop_schedules;
