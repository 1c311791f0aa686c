-- The dead letters' groups trigger (migration 00062) returns at once for
-- an INSERT marked counted (backstop.counted = 'INSERT', migration 00060):
-- the batch enqueue written by COPY, which counts its own batch in the
-- statement that writes its task.enqueued event and writes no dead letter
-- with a group (dlq_group is not among its columns). It read the COPY's
-- transition table for rows it could not find (about 0.18 ms per 1,000
-- rows). The mark stays for the task counts' trigger, which fires after
-- this one (triggers of one event fire in name order:
-- backstop_dlq_group_counts_insert, then backstop_task_counts_insert) and
-- clears it; fired in the other order this trigger would read the
-- transition table as before, exact still. Every other write is counted
-- as before; the counts need no correction.

-- +goose Up
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

-- +goose Down
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION backstop_dlq_group_count_deltas() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %I, pg_temp AS $b$
        BEGIN
            IF TG_OP = 'INSERT' THEN
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
