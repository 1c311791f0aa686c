-- The dead letters' groups (GET /v1/dlq/groups: by reason and by the
-- first 200 characters of the last error) of a filter of dead-letter
-- statuses and a queue only (the Dead letters page) are kept, not
-- counted: a read costs the groups, not the dead letters (two grouped
-- scans of every matching dead letter before). A trigger on each insert,
-- delete and change of a dead letter's queue, state, dead-letter status,
-- reason or error moves its group's count in the writing transaction
-- (SQLite has one writer: a counter row makes no one wait); the WHEN
-- clauses skip every row that is dead neither before nor after, so a
-- claim or a success costs the test only. A NULL reason or error is kept
-- apart from an empty one (reason_null, error_null), as the grouping of
-- the rows keeps them; an emptied group's row is deleted.

-- +goose Up
CREATE TABLE backstop_dlq_group_counts (
    dlq_status TEXT NOT NULL,
    queue TEXT NOT NULL,
    reason_null INTEGER NOT NULL,
    reason TEXT NOT NULL,
    error_null INTEGER NOT NULL,
    error TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (dlq_status, queue, reason_null, reason, error_null, error)
) WITHOUT ROWID;

-- +goose StatementBegin
CREATE TRIGGER backstop_dlq_group_counts_insert AFTER INSERT ON backstop_tasks
WHEN NEW.state = 'dead'
BEGIN
    INSERT INTO backstop_dlq_group_counts (dlq_status, queue, reason_null, reason, error_null, error, n)
    VALUES (COALESCE(NEW.dlq_status, ''), NEW.queue, NEW.dead_reason IS NULL, COALESCE(NEW.dead_reason, ''),
        NEW.last_error IS NULL, COALESCE(substr(NEW.last_error, 1, 200), ''), 1)
    ON CONFLICT (dlq_status, queue, reason_null, reason, error_null, error) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER backstop_dlq_group_counts_update AFTER UPDATE OF queue, state, dlq_status, dead_reason, last_error ON backstop_tasks
WHEN (OLD.state = 'dead' OR NEW.state = 'dead')
    AND (OLD.queue IS NOT NEW.queue OR OLD.state IS NOT NEW.state OR OLD.dlq_status IS NOT NEW.dlq_status
        OR OLD.dead_reason IS NOT NEW.dead_reason OR substr(OLD.last_error, 1, 200) IS NOT substr(NEW.last_error, 1, 200))
BEGIN
    UPDATE backstop_dlq_group_counts SET n = n - 1
    WHERE OLD.state = 'dead' AND dlq_status = COALESCE(OLD.dlq_status, '') AND queue = OLD.queue
        AND reason_null = (OLD.dead_reason IS NULL) AND reason = COALESCE(OLD.dead_reason, '')
        AND error_null = (OLD.last_error IS NULL) AND error = COALESCE(substr(OLD.last_error, 1, 200), '');
    DELETE FROM backstop_dlq_group_counts
    WHERE OLD.state = 'dead' AND n = 0 AND dlq_status = COALESCE(OLD.dlq_status, '') AND queue = OLD.queue
        AND reason_null = (OLD.dead_reason IS NULL) AND reason = COALESCE(OLD.dead_reason, '')
        AND error_null = (OLD.last_error IS NULL) AND error = COALESCE(substr(OLD.last_error, 1, 200), '');
    INSERT INTO backstop_dlq_group_counts (dlq_status, queue, reason_null, reason, error_null, error, n)
    SELECT COALESCE(NEW.dlq_status, ''), NEW.queue, NEW.dead_reason IS NULL, COALESCE(NEW.dead_reason, ''),
        NEW.last_error IS NULL, COALESCE(substr(NEW.last_error, 1, 200), ''), 1
    WHERE NEW.state = 'dead'
    ON CONFLICT (dlq_status, queue, reason_null, reason, error_null, error) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER backstop_dlq_group_counts_delete AFTER DELETE ON backstop_tasks
WHEN OLD.state = 'dead'
BEGIN
    UPDATE backstop_dlq_group_counts SET n = n - 1
    WHERE dlq_status = COALESCE(OLD.dlq_status, '') AND queue = OLD.queue
        AND reason_null = (OLD.dead_reason IS NULL) AND reason = COALESCE(OLD.dead_reason, '')
        AND error_null = (OLD.last_error IS NULL) AND error = COALESCE(substr(OLD.last_error, 1, 200), '');
    DELETE FROM backstop_dlq_group_counts
    WHERE n = 0 AND dlq_status = COALESCE(OLD.dlq_status, '') AND queue = OLD.queue
        AND reason_null = (OLD.dead_reason IS NULL) AND reason = COALESCE(OLD.dead_reason, '')
        AND error_null = (OLD.last_error IS NULL) AND error = COALESCE(substr(OLD.last_error, 1, 200), '');
END;
-- +goose StatementEnd

INSERT INTO backstop_dlq_group_counts (dlq_status, queue, reason_null, reason, error_null, error, n)
SELECT COALESCE(dlq_status, ''), queue, dead_reason IS NULL, COALESCE(dead_reason, ''),
    last_error IS NULL, COALESCE(substr(last_error, 1, 200), ''), count(*)
FROM backstop_tasks WHERE state = 'dead' GROUP BY 1, 2, 3, 4, 5, 6;

-- +goose Down
DROP TRIGGER backstop_dlq_group_counts_delete;
DROP TRIGGER backstop_dlq_group_counts_update;
DROP TRIGGER backstop_dlq_group_counts_insert;
DROP TABLE backstop_dlq_group_counts;
