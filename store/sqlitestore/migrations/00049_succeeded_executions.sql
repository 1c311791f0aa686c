-- A succeeded task's last attempt lives in its task row (execution_id,
-- attempt, worker_id, attempted_at, finalized_at): the success settle, the
-- drain's hot path, no longer inserts a backstop_executions row with its
-- two index entries. Readers add that execution from the row
-- (sqlitestore.succeededExecutions) unless backstop_executions already
-- has it, as it has for every task that succeeded before this migration.
-- No index is added: a worker's recent successes (the worker view) are
-- looked for among the most recently finished tasks
-- (backstop_tasks_finished), so the settle writes no index entry for them
-- (sqlitestore.workerSuccessesQuery).

-- +goose Up
SELECT 1;

-- +goose Down
-- Record the successes the rows hold, so the executions table is whole again.
INSERT INTO backstop_executions (execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome)
SELECT t.execution_id, t.id, t.attempt, COALESCE(t.worker_id, ''), COALESCE(t.attempted_at, t.finalized_at),
    t.finalized_at, 'succeeded'
FROM backstop_tasks t
WHERE t.state = 'succeeded' AND t.execution_id IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM backstop_executions x WHERE x.task_id = t.id AND x.execution_id = t.execution_id);
