-- A debounce without a grant on the task's state: the producer role
-- (deploy/postgres/roles.sql) may rewrite a waiting task's merge columns,
-- and nothing more of the row. A debounced enqueue also moves the waiting
-- task's run time (and so its state, between scheduled and pending) and
-- stores the debounce's settings; it does so through two functions, which
-- run as their owner (the role that migrates) and write only a task that
-- waits (scheduled or pending) holding the given kind and merge key (the
-- debounce key), its state only ever scheduled or pending. A third opens
-- the window of a task an enqueue with --unique-for just inserted. EXECUTE
-- is revoked from PUBLIC; roles.sql grants it to the producer and admin
-- roles.
-- The search_path is pinned to this schema (then pg_temp), so no object
-- another role creates is ever resolved by them.

-- +goose Up
-- +goose StatementBegin
DO $do$
BEGIN
    -- The debounced merge: the merged payload ($4 inline, NULL when
    -- spilled) at $7, the run time $8 (scheduled when after $7, pending
    -- otherwise), the quiet period $9 (µs) and max-wait deadline $10.
    EXECUTE format($f$
        CREATE FUNCTION backstop_debounce_merge(p_id text, p_kind text, p_key text,
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
    -- The settings of a debounced task just inserted.
    EXECUTE format($f$
        CREATE FUNCTION backstop_debounce_settings(p_id text, p_kind text, p_key text,
            p_for_us bigint, p_until timestamptz)
        RETURNS void
        LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = %I, pg_temp AS $b$
            UPDATE backstop_tasks t SET debounce_for_us = p_for_us, debounce_until = p_until
            WHERE t.id = p_id AND t.kind = p_kind AND t.merge_key = p_key
                AND t.state IN ('scheduled', 'pending')
        $b$ $f$, current_schema());
    -- The window of an idempotency key's task just inserted (--unique-for):
    -- only on a task that holds that key, has no window yet and never ran.
    EXECUTE format($f$
        CREATE FUNCTION backstop_unique_window(p_id text, p_key text, p_until timestamptz)
        RETURNS void
        LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = %I, pg_temp AS $b$
            UPDATE backstop_tasks t SET unique_until = p_until
            WHERE t.id = p_id AND t.idempotency_key = p_key AND t.unique_until IS NULL
                AND t.attempt = 0 AND t.state IN ('scheduled', 'pending', 'buffered')
        $b$ $f$, current_schema());
END
$do$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION backstop_debounce_merge(text, text, text, json, integer, boolean,
    timestamptz, timestamptz, bigint, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION backstop_debounce_settings(text, text, text, bigint, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION backstop_unique_window(text, text, timestamptz) FROM PUBLIC;

-- +goose Down
DROP FUNCTION backstop_unique_window(text, text, timestamptz);
DROP FUNCTION backstop_debounce_settings(text, text, text, bigint, timestamptz);
DROP FUNCTION backstop_debounce_merge(text, text, text, json, integer, boolean,
    timestamptz, timestamptz, bigint, timestamptz);
