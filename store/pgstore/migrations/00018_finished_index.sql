-- The index of finished tasks (retention, and the worker view's recent
-- successes) is keyed on the finish time alone. Keyed on (state,
-- finalized_at), every success settle compared the text state at each
-- step down the tree to insert its entry, which was one of the four index
-- insertions a drained task costs; the predicate already separates the two
-- states, and the readers filter on state as they scan.

-- +goose Up
CREATE INDEX backstop_tasks_finished_new ON backstop_tasks (finalized_at)
    WHERE state IN ('succeeded', 'canceled');
DROP INDEX backstop_tasks_finished;
ALTER INDEX backstop_tasks_finished_new RENAME TO backstop_tasks_finished;

-- +goose Down
CREATE INDEX backstop_tasks_finished_old ON backstop_tasks (state, finalized_at)
    WHERE state IN ('succeeded', 'canceled');
DROP INDEX backstop_tasks_finished;
ALTER INDEX backstop_tasks_finished_old RENAME TO backstop_tasks_finished;
