-- Tasks by queue, state and dead-letter status, kept instead of counted:
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

-- +goose Down
DROP TRIGGER backstop_task_counts_delete ON backstop_tasks;
DROP TRIGGER backstop_task_counts_update ON backstop_tasks;
DROP TRIGGER backstop_task_counts_insert ON backstop_tasks;
DROP FUNCTION backstop_task_count_deltas();
DROP TABLE backstop_task_count_deltas;
DROP TABLE backstop_task_counts;
