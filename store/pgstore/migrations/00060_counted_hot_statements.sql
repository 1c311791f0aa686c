-- The drain's two hot statements count their own batch: the claim
-- (pending → running) and the success settle (running → succeeded) append
-- their net change per (queue, state, dlq_status) to
-- backstop_task_count_deltas from a CTE of the statement itself (one row
-- per group and state, whatever the batch's size), and mark it by setting
-- backstop.counted to 'UPDATE' for the transaction. The statement trigger
-- that fires at that statement's end finds the mark, clears it and appends
-- nothing; every other statement (no mark) is counted by the trigger as
-- before. An INSERT may mark itself 'INSERT' the same way. Only a
-- statement that counts every group change of every row it writes sets
-- the mark (pgstore: countedMove). The counts need no correction: they
-- were exact before and stay so.

-- +goose Up
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION backstop_task_count_deltas() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %I, pg_temp AS $b$
        BEGIN
            IF current_setting('backstop.counted', true) = TG_OP THEN
                -- The statement counted itself; the mark is for it alone.
                PERFORM set_config('backstop.counted', '', true);
                RETURN NULL;
            END IF;
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

-- +goose Down
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION backstop_task_count_deltas() RETURNS trigger
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
