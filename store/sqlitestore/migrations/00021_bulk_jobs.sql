-- A redrive record is a bulk job's: the kind says which (redrive, the
-- dead letters replayed; or an action on live tasks: task.cancel,
-- task.run_now, task.delete, task.reprioritize). Each kind keeps the same
-- cursor, counts, runner heartbeat and per-item outcomes.

-- +goose Up
ALTER TABLE backstop_redrives ADD COLUMN kind TEXT NOT NULL DEFAULT 'redrive';

-- +goose Down
ALTER TABLE backstop_redrives DROP COLUMN kind;
