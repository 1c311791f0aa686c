-- Two reads of the console and the metrics that read every row they
-- counted, made index reads.
--
-- 1. The gauges (the metrics' store-derived gauges, and GET /v1/relay,
-- which reads them) counted every task in one grouped scan. They now read
-- the partial indexes the console's counts read (store/pgstore: Gauges),
-- and the open dead letters' oldest death and payload bytes come from
-- backstop_tasks_counts, rebuilt here to carry last_seen and payload_size
-- in its entries (INCLUDE). Its entries are written where they were (a
-- task scheduled, buffered or killed, a dead letter's status changed),
-- 16 bytes wider; both columns were already indexed or written with the
-- state, so no update that was HOT stops being HOT.
--
-- 2. The dead letters' error filter (error_contains: a substring of the
-- last error) reads a trigram index of the dead letters' errors, when the
-- server has pg_trgm (Debian's and most packages of PostgreSQL ship it; a
-- database owner may create it since PostgreSQL 13). The extension is
-- created in the public schema if no schema has it yet; if it cannot be
-- created (not installed, no right, no public schema) the index is left
-- out and the filter reads the rows as before (store/pgstore: errorLike
-- says which filters the index serves). A task pays for this index only
-- when it dies or when its dead letter's error changes.

-- +goose Up
CREATE INDEX backstop_tasks_counts_new ON backstop_tasks (queue, state, dlq_status) INCLUDE (last_seen, payload_size)
    WHERE state IN ('scheduled', 'buffered', 'dead');
DROP INDEX backstop_tasks_counts;
ALTER INDEX backstop_tasks_counts_new RENAME TO backstop_tasks_counts;

-- +goose StatementBegin
DO $$
DECLARE
    ops text;
BEGIN
    SELECT format('%I.%I', n.nspname, c.opcname) INTO ops
        FROM pg_opclass c JOIN pg_namespace n ON n.oid = c.opcnamespace JOIN pg_am a ON a.oid = c.opcmethod
        WHERE c.opcname = 'gin_trgm_ops' AND a.amname = 'gin' LIMIT 1;
    IF ops IS NULL AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public;
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE 'backstop: pg_trgm was not created (%): error_contains reads the rows', SQLERRM;
        END;
        SELECT format('%I.%I', n.nspname, c.opcname) INTO ops
            FROM pg_opclass c JOIN pg_namespace n ON n.oid = c.opcnamespace JOIN pg_am a ON a.oid = c.opcmethod
            WHERE c.opcname = 'gin_trgm_ops' AND a.amname = 'gin' LIMIT 1;
    END IF;
    IF ops IS NOT NULL THEN
        EXECUTE format('CREATE INDEX backstop_tasks_dead_error ON backstop_tasks USING gin (last_error %s) WHERE state = ''dead''', ops);
    END IF;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP INDEX IF EXISTS backstop_tasks_dead_error;
CREATE INDEX backstop_tasks_counts_old ON backstop_tasks (queue, state, dlq_status)
    WHERE state IN ('scheduled', 'buffered', 'dead');
DROP INDEX backstop_tasks_counts;
ALTER INDEX backstop_tasks_counts_old RENAME TO backstop_tasks_counts;
