-- Retention deletes workflow runs that finished for good (succeeded,
-- partial, compensated, canceled) longer ago than retention.runs, oldest
-- first: an index on their end keeps each round from scanning every run.

-- +goose Up
CREATE INDEX backstop_runs_finished ON backstop_runs (finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP INDEX backstop_runs_finished;
