-- Autovacuum and autoanalyze of the three tables that hold the history
-- retention keeps (tasks, their attempts, the event log) by counts of
-- changed rows instead of a fraction of the table.
--
-- PostgreSQL's defaults vacuum a table once 20 % of its rows are dead
-- (autovacuum_vacuum_scale_factor 0.2) and analyze it once 10 % changed:
-- 20,000 dead row versions on a table of 100,000 tasks, 2,000,000 on one
-- that keeps 10 million finished tasks. Every claim and settle leaves a
-- dead version of its task row (an update of the state is never HOT), so
-- with a large history the queue's hot rows were not pruned, nor their
-- entries removed from the claim and running indexes, for millions of
-- tasks at a time, and each claim walked the dead entries of its queue's
-- range (docs/benchmarks.md, "History"). By count, a table is vacuumed
-- after 10,000 dead versions (about 5,000 drained tasks; autovacuum looks
-- at it once a minute, autovacuum_naptime) and analyzed after 50,000
-- changes, whatever the history: the size of the work since the last
-- vacuum, not of the table. A vacuum of a table whose old rows are all
-- visible reads only the pages that changed, and skips the index passes
-- when few pages hold dead rows (PostgreSQL 14 and later); rows only
-- inserted (the event log, failed attempts) are vacuumed every 100,000
-- inserts so that their pages are marked all-visible early.
--
-- An operator's own ALTER TABLE ... SET of these settings after this
-- migration stays; the down migration resets them to the server's
-- defaults.

-- +goose Up
ALTER TABLE backstop_tasks SET (
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 50000);
ALTER TABLE backstop_executions SET (
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 50000);
ALTER TABLE backstop_events SET (
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 50000);

-- +goose Down
ALTER TABLE backstop_events RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor, autovacuum_analyze_threshold);
ALTER TABLE backstop_executions RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor, autovacuum_analyze_threshold);
ALTER TABLE backstop_tasks RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor, autovacuum_analyze_threshold);
