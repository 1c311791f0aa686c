-- A run's tasks (the tasks whose run_id attribute is the run's: GET
-- /v1/runs/{id} and its task list) are read through an index of that
-- attribute instead of a json_extract of every task's attributes. SQLite
-- rewrites an expression index's entry only when a column the expression
-- reads changes: attributes are written at enqueue only, so a claim or a
-- settle writes nothing here. A task without a run_id has a NULL entry.

-- +goose Up
CREATE INDEX backstop_tasks_run ON backstop_tasks (json_extract(attributes, '$.run_id'), id);

-- +goose Down
DROP INDEX backstop_tasks_run;
