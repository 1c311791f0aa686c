-- Every UPDATE of backstop_tasks counts its own change of the kept task
-- counts and of the dead letters' groups, and the two AFTER UPDATE
-- statement triggers (backstop_task_counts_update, migration 00059;
-- backstop_dlq_group_counts_update, 00062) are dropped. Their functions
-- returned at once for the statements that counted themselves (00060,
-- 00064), but PostgreSQL captures a statement trigger's transition tables
-- (the old and the new version of every updated row) before its function
-- runs: about 2 µs per updated task on every claim, settle and redrive.
-- The store's statements that change a task's group (queue, state,
-- dead-letter status; a dead letter's fingerprint, reason or error) append
-- their net change to the deltas in the statement (store/pgstore/counts.go:
-- countedMove, countedChange); the ones that change no group append
-- nothing. backstop_debounce_merge (00048), which moves a waiting task
-- between scheduled and pending, counts itself the same way here.
--
-- The INSERT and DELETE triggers stay. An UPDATE written by hand past the
-- store is not counted any more: the leader's reconcile of the counts
-- (every 10 minutes) corrects the drift. A binary older than this schema
-- would write uncounted updates (its statements relied on the triggers);
-- the same reconcile corrects them. The down migration restores both
-- triggers and the function; the statements of this version mark
-- themselves counted, so the restored triggers skip them.

-- +goose Up
DROP TRIGGER backstop_task_counts_update ON backstop_tasks;
DROP TRIGGER backstop_dlq_group_counts_update ON backstop_tasks;

-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION backstop_debounce_merge(p_id text, p_kind text, p_key text,
            p_payload json, p_payload_size integer, p_payload_spilled boolean,
            p_now timestamptz, p_run_at timestamptz, p_for_us bigint, p_until timestamptz)
        RETURNS SETOF backstop_tasks
        LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = %I, pg_temp AS $b$
            WITH b AS (
                SELECT t.id AS b_id, t.queue AS b_queue, t.state AS b_state, COALESCE(t.dlq_status, '') AS b_dlq_status
                FROM backstop_tasks t
                WHERE t.id = p_id AND t.kind = p_kind AND t.merge_key = p_key
                    AND t.state IN ('scheduled', 'pending')
                FOR NO KEY UPDATE OF t
            ), u AS (
                UPDATE backstop_tasks t SET
                    payload = p_payload, payload_size = p_payload_size, payload_spilled = p_payload_spilled,
                    merge_count = t.merge_count + 1, updated_at = p_now,
                    run_at = p_run_at,
                    state = CASE WHEN p_run_at > p_now THEN 'scheduled' ELSE 'pending' END,
                    debounce_for_us = p_for_us, debounce_until = p_until
                FROM b WHERE t.id = b.b_id
                RETURNING t AS task, t.queue, t.state, COALESCE(t.dlq_status, '') AS dlq_status, b.*
            ), counted AS (
                INSERT INTO backstop_task_count_deltas (queue, state, dlq_status, n)
                SELECT queue, state, dlq_status, sum(n) FROM (
                    SELECT queue, state, dlq_status, 1 AS n FROM u
                    UNION ALL
                    SELECT b_queue, b_state, b_dlq_status, -1 FROM u) c
                GROUP BY 1, 2, 3 HAVING sum(n) <> 0
            )
            SELECT (u.task).* FROM u
        $b$ $f$, current_schema());
END
$do$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION backstop_debounce_merge(p_id text, p_kind text, p_key text,
            p_payload json, p_payload_size integer, p_payload_spilled boolean,
            p_now timestamptz, p_run_at timestamptz, p_for_us bigint, p_until timestamptz)
        RETURNS SETOF backstop_tasks
        LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = %I, pg_temp AS $b$
            UPDATE backstop_tasks t SET
                payload = p_payload, payload_size = p_payload_size, payload_spilled = p_payload_spilled,
                merge_count = t.merge_count + 1, updated_at = p_now,
                run_at = p_run_at,
                state = CASE WHEN p_run_at > p_now THEN 'scheduled' ELSE 'pending' END,
                debounce_for_us = p_for_us, debounce_until = p_until
            WHERE t.id = p_id AND t.kind = p_kind AND t.merge_key = p_key
                AND t.state IN ('scheduled', 'pending')
            RETURNING t.*
        $b$ $f$, current_schema());
END
$do$;
-- +goose StatementEnd
CREATE TRIGGER backstop_dlq_group_counts_update AFTER UPDATE ON backstop_tasks
    REFERENCING OLD TABLE AS old_tasks NEW TABLE AS new_tasks FOR EACH STATEMENT EXECUTE FUNCTION backstop_dlq_group_count_deltas();
CREATE TRIGGER backstop_task_counts_update AFTER UPDATE ON backstop_tasks
    REFERENCING OLD TABLE AS old_tasks NEW TABLE AS new_tasks FOR EACH STATEMENT EXECUTE FUNCTION backstop_task_count_deltas();
