-- The lease index was partial on state = 'running'. Every batched statement
-- that joins its input to running tasks (settle, heartbeat) carries
-- `state = 'running'`, which lets the planner pick that index: when the
-- statistics were taken with few tasks running it scans every running task
-- for every input row, and a 1,000-task settlement took over a second while
-- 2,000 tasks were running (a 50 s stall in `backstop bench`). Keyed on the
-- lease itself, the index still serves the lease-expiry sweep
-- (`lease_expires_at < now` implies NOT NULL), and those statements go by
-- primary key. A running task always has a lease and every other state
-- clears it, so the index holds the same rows.

-- +goose Up
DROP INDEX backstop_tasks_lease;
CREATE INDEX backstop_tasks_lease ON backstop_tasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

-- +goose Down
DROP INDEX backstop_tasks_lease;
CREATE INDEX backstop_tasks_lease ON backstop_tasks (lease_expires_at) WHERE state = 'running';
