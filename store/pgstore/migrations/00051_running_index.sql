-- One index of the running tasks instead of two. A claim's new row
-- version is never HOT (the state changes, and partial indexes test it),
-- so it writes an entry in every index whose predicate a running task
-- meets: the primary key, the lease index (the lease-expiry sweep) and
-- the running index (a limited claim's count, the console's counts of
-- running tasks) — three where the raw claim floor writes one. Both
-- indexes held the same rows (a running task always has a lease, every
-- other state clears it), so one index keyed (queue, kind,
-- lease_expires_at) on the running tasks serves all of them: the counts
-- read its leading columns as before, and the sweep reads the whole
-- index, which holds the running tasks only (bounded by the workers'
-- slots), filtering on the lease in the index before it reads a row.
-- A claim, and a heartbeat (which moves the lease), now write two
-- entries instead of three.

-- +goose Up
CREATE INDEX backstop_tasks_running_lease ON backstop_tasks (queue, kind, lease_expires_at) WHERE state = 'running';
DROP INDEX backstop_tasks_running;
DROP INDEX backstop_tasks_lease;
ALTER INDEX backstop_tasks_running_lease RENAME TO backstop_tasks_running;

-- +goose Down
CREATE INDEX backstop_tasks_lease ON backstop_tasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
CREATE INDEX backstop_tasks_running_old ON backstop_tasks (queue, kind) WHERE state = 'running';
DROP INDEX backstop_tasks_running;
ALTER INDEX backstop_tasks_running_old RENAME TO backstop_tasks_running;
