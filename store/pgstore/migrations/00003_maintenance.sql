-- Maintenance: the leadership lease, the indexes retention needs, and the
-- operator views of seed 002 for DBAs (the CLI and library read the same
-- rows through the store's View).

-- +goose Up
-- One row per leadership (e.g. 'maintenance'): held by leader_id until
-- expires_at, taken over by anyone once it has passed.
CREATE TABLE backstop_leaders (
    name       text PRIMARY KEY,
    leader_id  text NOT NULL,
    elected_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Retention deletes finished tasks oldest first without scanning the table.
CREATE INDEX backstop_tasks_finished ON backstop_tasks (state, finalized_at)
    WHERE state IN ('succeeded', 'canceled');
-- Recent failures read failed attempts by time.
CREATE INDEX backstop_executions_failed ON backstop_executions (finished_at)
    WHERE outcome IN ('transient_error', 'permanent_error', 'timeout', 'lease_expired');

-- Scheduled tasks that already failed at least once: waiting for a retry.
CREATE VIEW backstop_pending_retries AS
SELECT id, queue, kind, attempt, max_attempts, run_at, last_error, attributes, created_at
FROM backstop_tasks
WHERE state = 'scheduled' AND attempt > 0;

-- Every dead-letter record, open or closed.
CREATE VIEW backstop_dead_letters AS
SELECT id, queue, kind, dead_reason, dlq_status, attempt, max_attempts, dead_count, replay_count,
       first_seen, last_seen, last_error, attributes, replayed_from
FROM backstop_tasks
WHERE state = 'dead';

-- Dead letters whose attempts ran out.
CREATE VIEW backstop_retry_exhausted AS
SELECT * FROM backstop_dead_letters WHERE dead_reason = 'attempts_exhausted';

-- Tasks with a failed attempt in the last 24 hours, with the count of
-- those failures and the latest one.
CREATE VIEW backstop_recent_failures AS
SELECT t.id, t.queue, t.kind, t.state, t.attempt, t.max_attempts, f.failures,
       f.last_failure_at, t.last_error, t.attributes
FROM backstop_tasks t
JOIN (
    SELECT task_id, count(*) AS failures, max(finished_at) AS last_failure_at
    FROM backstop_executions
    WHERE outcome IN ('transient_error', 'permanent_error', 'timeout', 'lease_expired')
      AND finished_at >= now() - interval '24 hours'
    GROUP BY task_id
) f ON f.task_id = t.id;

-- +goose Down
DROP VIEW backstop_recent_failures;
DROP VIEW backstop_retry_exhausted;
DROP VIEW backstop_dead_letters;
DROP VIEW backstop_pending_retries;
DROP INDEX backstop_executions_failed;
DROP INDEX backstop_tasks_finished;
DROP TABLE backstop_leaders;
