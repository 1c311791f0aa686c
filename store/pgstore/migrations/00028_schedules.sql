-- Periodic tasks: one row per schedule, its timing (every_ms, or cron in
-- tz), its missed-tick policy, the task a tick enqueues (task, JSON), and
-- where it stands. The leader's round advances next_run_at in the same
-- transaction as it enqueues the tick's task, only while next_run_at is
-- still the tick it read: two leaders never both enqueue a tick.

-- +goose Up
CREATE TABLE backstop_schedules (
	name             text PRIMARY KEY,
	every_ms         bigint NOT NULL DEFAULT 0,
	cron             text NOT NULL DEFAULT '',
	tz               text NOT NULL DEFAULT '',
	missed           text NOT NULL DEFAULT 'skip',
	task             text NOT NULL,
	paused           boolean NOT NULL DEFAULT false,
	next_run_at      timestamptz NOT NULL,
	last_run_at      timestamptz,
	last_outcome     text NOT NULL DEFAULT '',
	last_task_id     text NOT NULL DEFAULT '',
	last_enqueued_at timestamptz,
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL
);
CREATE INDEX backstop_schedules_next ON backstop_schedules (next_run_at) WHERE NOT paused;

-- +goose Down
DROP TABLE backstop_schedules;
