-- The run index (migration 00050) leaves out the tasks whose id starts
-- with their run_id and a dot: a workflow's step tasks (<run id>.<step
-- id>[.<item>]), its compensations and the messages its steps wait for.
-- A state change is never a HOT update, so every claim and settle of a
-- task in the index wrote an entry in it; these tasks now write none. A
-- run's tasks are read from two places (store/pgstore: listWhere): the
-- index for the tasks whose id does not start with the prefix, and the
-- primary key's range of ids that do, each filtered by the run_id
-- attribute. Between them they hold every task of the run, whatever wrote
-- it: the split is by the id alone.
--
-- The primary key holds ids with a prefix as one range only where ids
-- sort byte by byte (the C or POSIX collation, libc provider); elsewhere
-- the index keeps every task with a run_id, and the read's two parts both
-- read it.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT CASE WHEN a.attcollation = 100
            THEN coalesce(to_jsonb(d)->>'datlocprovider', 'c') = 'c' AND d.datcollate IN ('C', 'POSIX')
            ELSE c.collname IN ('C', 'POSIX') END
        FROM pg_attribute a, pg_collation c, pg_database d
        WHERE a.attrelid = 'backstop_tasks'::regclass AND a.attname = 'id'
            AND c.oid = a.attcollation AND d.datname = current_database()) THEN
        DROP INDEX backstop_tasks_run;
        CREATE INDEX backstop_tasks_run ON backstop_tasks ((attributes->>'run_id'), id)
            WHERE attributes ? 'run_id' AND NOT starts_with(id, (attributes->>'run_id') || '.');
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP INDEX backstop_tasks_run;
CREATE INDEX backstop_tasks_run ON backstop_tasks ((attributes->>'run_id'), id) WHERE attributes ? 'run_id';
