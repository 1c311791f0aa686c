-- The dead letters' groups (GET /v1/dlq/groups: by reason and by error)
-- of a filter of dead-letter statuses and a queue only (the Dead letters
-- page) are kept, not counted: a read costs the groups, not the dead
-- letters (it counted every matching entry of backstop_tasks_dlq_groups,
-- 100,000 at 100,000 open dead letters).
--
-- backstop_dlq_group_counts holds the dead letters by (dlq_status, queue,
-- dlq_group: the fingerprint of reason and error, migration 00050), with
-- the group's reason and error (its first 200 characters), so a read
-- touches no task; a
-- dead letter without a fingerprint is not in it (it is counted from its
-- row, as before). Statement-level triggers over the statement's
-- transition tables (shared with the task counts' triggers of migration
-- 00059, which capture them already) append each statement's net change
-- per group of dead letters to backstop_dlq_group_count_deltas, in the
-- writing transaction and as new rows only (two settles killing tasks of
-- the same group never wait on a counter row; a redrive of 10,000 dead
-- letters of one group appends one row a batch). A statement that touches
-- no dead letter (a claim, a success) reads its transition tables once
-- more and appends nothing. The maintenance service task_counts folds the
-- deltas with the task counts' and reconciles both now and then. The
-- trigger function runs as its owner, its search_path pinned to this
-- schema.

-- +goose Up
CREATE TABLE backstop_dlq_group_counts (
    dlq_status text NOT NULL,
    queue text NOT NULL,
    dlq_group bigint NOT NULL,
    dead_reason text,
    last_error text,
    n bigint NOT NULL,
    PRIMARY KEY (dlq_status, queue, dlq_group)
);

CREATE TABLE backstop_dlq_group_count_deltas (
    dlq_status text NOT NULL,
    queue text NOT NULL,
    dlq_group bigint NOT NULL,
    dead_reason text,
    last_error text,
    n bigint NOT NULL
);

-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION backstop_dlq_group_count_deltas() RETURNS trigger
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

-- The triggers lock out writers until this migration commits, so the
-- first counts below agree with the deltas that follow.
CREATE TRIGGER backstop_dlq_group_counts_insert AFTER INSERT ON backstop_tasks
    REFERENCING NEW TABLE AS new_tasks FOR EACH STATEMENT EXECUTE FUNCTION backstop_dlq_group_count_deltas();
CREATE TRIGGER backstop_dlq_group_counts_update AFTER UPDATE ON backstop_tasks
    REFERENCING OLD TABLE AS old_tasks NEW TABLE AS new_tasks FOR EACH STATEMENT EXECUTE FUNCTION backstop_dlq_group_count_deltas();
CREATE TRIGGER backstop_dlq_group_counts_delete AFTER DELETE ON backstop_tasks
    REFERENCING OLD TABLE AS old_tasks FOR EACH STATEMENT EXECUTE FUNCTION backstop_dlq_group_count_deltas();

INSERT INTO backstop_dlq_group_counts (dlq_status, queue, dlq_group, dead_reason, last_error, n)
SELECT COALESCE(dlq_status, ''), queue, dlq_group, dead_reason, left(last_error, 200), count(*) FROM backstop_tasks
WHERE state = 'dead' AND dlq_group IS NOT NULL GROUP BY 1, 2, 3, 4, 5;

ALTER TABLE backstop_dlq_group_count_deltas SET (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0);

-- +goose Down
DROP TRIGGER backstop_dlq_group_counts_delete ON backstop_tasks;
DROP TRIGGER backstop_dlq_group_counts_update ON backstop_tasks;
DROP TRIGGER backstop_dlq_group_counts_insert ON backstop_tasks;
DROP FUNCTION backstop_dlq_group_count_deltas();
DROP TABLE backstop_dlq_group_count_deltas;
DROP TABLE backstop_dlq_group_counts;
