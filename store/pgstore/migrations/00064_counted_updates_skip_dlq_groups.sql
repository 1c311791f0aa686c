-- The dead letters' groups trigger (migration 00062) returns at once for
-- every statement marked counted (backstop.counted equal to the trigger's
-- TG_OP, migration 00060), the claim and the success settle's UPDATE now
-- too, as 00063 did for the batch enqueue's INSERT: a statement may set
-- the mark only if it counts every change of every row it writes, and the
-- marked ones write no dead letter (the claim moves pending tasks to
-- running, the success settle running tasks to succeeded, the COPY writes
-- no dlq_group), so the groups' deltas they would append are always none.
-- It read their transition tables for rows it could not find (about 0.07
-- ms per batch of 1,000). The mark stays for the task counts' trigger,
-- which fires after this one (by name: backstop_dlq_group_counts_* before
-- backstop_task_counts_*) and clears it; fired in the other order this
-- trigger would read the transition tables as before, exact still. The
-- counts need no correction.

-- +goose Up
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION backstop_dlq_group_count_deltas() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %I, pg_temp AS $b$
        BEGIN
            IF current_setting('backstop.counted', true) = TG_OP THEN
                -- A statement that counted itself (a claim, a success
                -- settle, a batch enqueue by COPY) writes no dead letter
                -- with a group. The mark is left for the task counts'
                -- trigger, which fires after this one (by name) and
                -- clears it.
                RETURN NULL;
            ELSIF TG_OP = 'INSERT' THEN
                INSERT INTO backstop_dlq_group_count_deltas (dlq_status, queue, dlq_group, dead_reason, last_error, n)
                SELECT COALESCE(dlq_status, ''), queue, dlq_group, dead_reason, left(last_error, 200), count(*) FROM new_tasks
                WHERE state = 'dead' AND dlq_group IS NOT NULL GROUP BY 1, 2, 3, 4, 5;
            ELSIF TG_OP = 'DELETE' THEN
                INSERT INTO backstop_dlq_group_count_deltas (dlq_status, queue, dlq_group, dead_reason, last_error, n)
                SELECT COALESCE(dlq_status, ''), queue, dlq_group, dead_reason, left(last_error, 200), -count(*) FROM old_tasks
                WHERE state = 'dead' AND dlq_group IS NOT NULL GROUP BY 1, 2, 3, 4, 5;
            ELSE
                -- A statement that changes no dead letter's group (a
                -- heartbeat, a retry) appends nothing.
                INSERT INTO backstop_dlq_group_count_deltas (dlq_status, queue, dlq_group, dead_reason, last_error, n)
                SELECT dlq_status, queue, dlq_group, dead_reason, last_error, sum(n) FROM (
                    SELECT COALESCE(dlq_status, '') AS dlq_status, queue, dlq_group, dead_reason, left(last_error, 200) AS last_error, 1 AS n
                    FROM new_tasks WHERE state = 'dead' AND dlq_group IS NOT NULL
                    UNION ALL
                    SELECT COALESCE(dlq_status, ''), queue, dlq_group, dead_reason, left(last_error, 200), -1
                    FROM old_tasks WHERE state = 'dead' AND dlq_group IS NOT NULL) c
                GROUP BY 1, 2, 3, 4, 5 HAVING sum(n) <> 0;
            END IF;
            RETURN NULL;
        END
        $b$ $f$, current_schema());
END
$do$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION backstop_dlq_group_count_deltas() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %I, pg_temp AS $b$
        BEGIN
            IF TG_OP = 'INSERT' AND current_setting('backstop.counted', true) = 'INSERT' THEN
                -- An INSERT that counted itself (a batch enqueue by COPY)
                -- writes no dead letter with a group. The mark is left
                -- for the task counts' trigger, which fires after this
                -- one (by name) and clears it.
                RETURN NULL;
            ELSIF TG_OP = 'INSERT' THEN
                INSERT INTO backstop_dlq_group_count_deltas (dlq_status, queue, dlq_group, dead_reason, last_error, n)
                SELECT COALESCE(dlq_status, ''), queue, dlq_group, dead_reason, left(last_error, 200), count(*) FROM new_tasks
                WHERE state = 'dead' AND dlq_group IS NOT NULL GROUP BY 1, 2, 3, 4, 5;
            ELSIF TG_OP = 'DELETE' THEN
                INSERT INTO backstop_dlq_group_count_deltas (dlq_status, queue, dlq_group, dead_reason, last_error, n)
                SELECT COALESCE(dlq_status, ''), queue, dlq_group, dead_reason, left(last_error, 200), -count(*) FROM old_tasks
                WHERE state = 'dead' AND dlq_group IS NOT NULL GROUP BY 1, 2, 3, 4, 5;
            ELSE
                -- A statement that changes no dead letter's group (a
                -- claim, a success, a heartbeat) appends nothing.
                INSERT INTO backstop_dlq_group_count_deltas (dlq_status, queue, dlq_group, dead_reason, last_error, n)
                SELECT dlq_status, queue, dlq_group, dead_reason, last_error, sum(n) FROM (
                    SELECT COALESCE(dlq_status, '') AS dlq_status, queue, dlq_group, dead_reason, left(last_error, 200) AS last_error, 1 AS n
                    FROM new_tasks WHERE state = 'dead' AND dlq_group IS NOT NULL
                    UNION ALL
                    SELECT COALESCE(dlq_status, ''), queue, dlq_group, dead_reason, left(last_error, 200), -1
                    FROM old_tasks WHERE state = 'dead' AND dlq_group IS NOT NULL) c
                GROUP BY 1, 2, 3, 4, 5 HAVING sum(n) <> 0;
            END IF;
            RETURN NULL;
        END
        $b$ $f$, current_schema());
END
$do$;
-- +goose StatementEnd

