-- Two reads of the console that scanned, made index reads.
--
-- 1. A run's tasks (GET /v1/runs/{id} and its task list: the tasks whose
-- run_id attribute is the run's) are read through an index of the run_id
-- attribute, for the tasks that have one, instead of a containment test
-- of every task's attributes. Its cost: a task with a run_id (a workflow
-- step, a batch's task) writes an entry when it is enqueued and on every
-- later update of its state (a claim, a settle: an update of the state is
-- never HOT here), about 40 bytes; a task without a run_id pays the test
-- of the predicate only.
--
-- 2. The dead letters' groups (GET /v1/dlq/groups: by reason and by the
-- first 200 characters of the last error) count a short fingerprint of
-- the pair, dlq_group, in an index that holds the dead letters only, by
-- dead-letter status: an index-only count per group, then one row read
-- per group for its reason and error. The fingerprint is written when a
-- task becomes a dead letter (the settle that kills it, or a dead letter
-- taken over by a succeeded step), never on a claim or a success; it
-- means something on a dead row only (the index holds no other). A dead
-- letter without one (none is left by this migration) is counted from its
-- row as before (store/pgstore: DLQGroups),
-- found through an index of those only, which is empty unless a path
-- kills a task without writing its fingerprint (no claim or settle writes
-- an entry in it: their rows fail its predicate).

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION backstop_dlq_group(reason text, error text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ('x' || left(md5(
        CASE WHEN reason IS NULL THEN 'n' ELSE 'v' || reason END || chr(1) ||
        CASE WHEN error IS NULL THEN 'n' ELSE 'v' || left(error, 200) END), 16))::bit(64)::bigint
    $$;
-- +goose StatementEnd
ALTER TABLE backstop_tasks ADD COLUMN dlq_group bigint;
-- The indexes before the backfill: its updates then write their entries
-- (no HOT update), and no index starts with broken HOT chains, which would
-- keep it from queries until every older transaction of the server ends.
CREATE INDEX backstop_tasks_dlq_groups ON backstop_tasks (dlq_status, dlq_group, queue) WHERE state = 'dead';
CREATE INDEX backstop_tasks_dlq_ungrouped ON backstop_tasks (id) WHERE state = 'dead' AND dlq_group IS NULL;
CREATE INDEX backstop_tasks_run ON backstop_tasks ((attributes->>'run_id'), id) WHERE attributes ? 'run_id';
UPDATE backstop_tasks SET dlq_group = backstop_dlq_group(dead_reason, last_error) WHERE state = 'dead';

-- +goose Down
DROP INDEX backstop_tasks_run;
DROP INDEX backstop_tasks_dlq_ungrouped;
DROP INDEX backstop_tasks_dlq_groups;
ALTER TABLE backstop_tasks DROP COLUMN dlq_group;
DROP FUNCTION backstop_dlq_group(text, text);
