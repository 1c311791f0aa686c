-- Two console reads that cost every waiting and dead task, or every dead
-- letter of a queue, made reads of what they show.
--
-- 1. Tasks by queue, state and dead-letter status, kept instead of counted:
-- GET /v1/queues and /v1/counts read a few rows whatever the number of
-- tasks (a count of every waiting and dead task read 200,000 index
-- entries at 100,000 of each).
--
-- Every statement that inserts, updates or deletes tasks appends its net
-- change per (queue, state, dlq_status) to backstop_task_count_deltas,
-- from statement-level triggers over the statement's transition tables:
-- in the statement's transaction, so a change and its delta commit
-- together, and as new rows only, so concurrent claims and settles never
-- wait for one another on a counter row. A writer cannot forget it. The
-- maintenance service task_counts folds the deltas into
-- backstop_task_counts (one row per group) and, now and then, compares
-- them with a real count in one snapshot and appends the difference.
-- The counts are backstop_task_counts plus the deltas not folded yet.
-- dlq_status is '' for a task without one. The trigger function runs as
-- its owner (the role that migrates), so the roles that write tasks need
-- no grant on the deltas; its search_path is pinned to this schema.

--
-- 2. The trigram index of the dead letters' errors (migration 00055)
-- also holds their queue, when the server has btree_gin (a contrib
-- extension like pg_trgm, which a database owner may create): a filter of
-- one queue's dead letters by an error text reads the index's entries of
-- both and intersects them, instead of reading the queue's dead letters
-- (or the text's, in every queue) and checking each row. Without
-- btree_gin (or without the trigram index) the index stays as it was. The
-- index keeps its name; a filter by text alone reads it as before.

-- +goose Up
CREATE TABLE backstop_task_counts (
    queue text NOT NULL,
    state text NOT NULL,
    dlq_status text NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (queue, state, dlq_status)
);

CREATE TABLE backstop_task_count_deltas (
    queue text NOT NULL,
    state text NOT NULL,
    dlq_status text NOT NULL,
    n bigint NOT NULL
);

-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION backstop_task_count_deltas() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %I, pg_temp AS $b$
        BEGIN
            IF TG_OP = 'INSERT' THEN
                INSERT INTO backstop_task_count_deltas (queue, state, dlq_status, n)
                SELECT queue, state, COALESCE(dlq_status, ''), count(*) FROM new_tasks GROUP BY 1, 2, 3;
            ELSIF TG_OP = 'DELETE' THEN
                INSERT INTO backstop_task_count_deltas (queue, state, dlq_status, n)
                SELECT queue, state, COALESCE(dlq_status, ''), -count(*) FROM old_tasks GROUP BY 1, 2, 3;
            ELSE
                -- An update that changes no group (a heartbeat, a
                -- progress report) appends nothing.
                INSERT INTO backstop_task_count_deltas (queue, state, dlq_status, n)
                SELECT queue, state, dlq_status, sum(n) FROM (
                    SELECT queue, state, COALESCE(dlq_status, '') AS dlq_status, 1 AS n FROM new_tasks
                    UNION ALL
                    SELECT queue, state, COALESCE(dlq_status, ''), -1 FROM old_tasks) c
                GROUP BY 1, 2, 3 HAVING sum(n) <> 0;
            END IF;
            RETURN NULL;
        END
        $b$ $f$, current_schema());
END
$do$;
-- +goose StatementEnd

-- Creating the triggers locks out writers until this migration commits,
-- so the first counts below agree with the deltas that follow.
CREATE TRIGGER backstop_task_counts_insert AFTER INSERT ON backstop_tasks
    REFERENCING NEW TABLE AS new_tasks FOR EACH STATEMENT EXECUTE FUNCTION backstop_task_count_deltas();
CREATE TRIGGER backstop_task_counts_update AFTER UPDATE ON backstop_tasks
    REFERENCING OLD TABLE AS old_tasks NEW TABLE AS new_tasks FOR EACH STATEMENT EXECUTE FUNCTION backstop_task_count_deltas();
CREATE TRIGGER backstop_task_counts_delete AFTER DELETE ON backstop_tasks
    REFERENCING OLD TABLE AS old_tasks FOR EACH STATEMENT EXECUTE FUNCTION backstop_task_count_deltas();

INSERT INTO backstop_task_counts (queue, state, dlq_status, n)
SELECT queue, state, COALESCE(dlq_status, ''), count(*) FROM backstop_tasks GROUP BY 1, 2, 3;

-- The deltas are appended and deleted all day: vacuum them by count.
ALTER TABLE backstop_task_count_deltas SET (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0);

-- +goose StatementBegin
DO $$
DECLARE
    trgm text;
    gin text;
BEGIN
    SELECT format('%I.%I', n.nspname, c.opcname) INTO trgm
        FROM pg_opclass c JOIN pg_namespace n ON n.oid = c.opcnamespace JOIN pg_am a ON a.oid = c.opcmethod
        WHERE c.opcname = 'gin_trgm_ops' AND a.amname = 'gin' LIMIT 1;
    IF trgm IS NULL OR to_regclass('backstop_tasks_dead_error') IS NULL THEN
        RETURN;
    END IF;
    SELECT format('%I.%I', n.nspname, c.opcname) INTO gin
        FROM pg_opclass c JOIN pg_namespace n ON n.oid = c.opcnamespace JOIN pg_am a ON a.oid = c.opcmethod
        WHERE c.opcname = 'text_ops' AND a.amname = 'gin' LIMIT 1;
    IF gin IS NULL AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'btree_gin') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS btree_gin SCHEMA public;
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE 'backstop: btree_gin was not created (%): error_contains with a queue reads the queue''s dead letters', SQLERRM;
        END;
        SELECT format('%I.%I', n.nspname, c.opcname) INTO gin
            FROM pg_opclass c JOIN pg_namespace n ON n.oid = c.opcnamespace JOIN pg_am a ON a.oid = c.opcmethod
            WHERE c.opcname = 'text_ops' AND a.amname = 'gin' LIMIT 1;
    END IF;
    IF gin IS NOT NULL THEN
        EXECUTE format('CREATE INDEX backstop_tasks_dead_error_new ON backstop_tasks USING gin (queue %s, last_error %s) WHERE state = ''dead''', gin, trgm);
        DROP INDEX backstop_tasks_dead_error;
        ALTER INDEX backstop_tasks_dead_error_new RENAME TO backstop_tasks_dead_error;
    END IF;
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    trgm text;
BEGIN
    IF (SELECT indnatts FROM pg_index WHERE indexrelid = to_regclass('backstop_tasks_dead_error')) = 2 THEN
        SELECT format('%I.%I', n.nspname, c.opcname) INTO trgm
            FROM pg_opclass c JOIN pg_namespace n ON n.oid = c.opcnamespace JOIN pg_am a ON a.oid = c.opcmethod
            WHERE c.opcname = 'gin_trgm_ops' AND a.amname = 'gin' LIMIT 1;
        EXECUTE format('CREATE INDEX backstop_tasks_dead_error_old ON backstop_tasks USING gin (last_error %s) WHERE state = ''dead''', trgm);
        DROP INDEX backstop_tasks_dead_error;
        ALTER INDEX backstop_tasks_dead_error_old RENAME TO backstop_tasks_dead_error;
    END IF;
END $$;
-- +goose StatementEnd
DROP TRIGGER backstop_task_counts_delete ON backstop_tasks;
DROP TRIGGER backstop_task_counts_update ON backstop_tasks;
DROP TRIGGER backstop_task_counts_insert ON backstop_tasks;
DROP FUNCTION backstop_task_count_deltas();
DROP TABLE backstop_task_count_deltas;
DROP TABLE backstop_task_counts;
