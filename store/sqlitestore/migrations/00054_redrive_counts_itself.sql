-- A redrive batch counts its own batch (sqlitestore.RedriveBatch): its
-- replayed dead letters leave (queue, dead, open) and their groups and
-- enter (queue, their state, no dead-letter status), moved by one grouped
-- upsert of the task counts and one update of each group's count, in the
-- batch's transaction, instead of the two update triggers' statements for
-- every row (four to five statements a row: about 1.5 of the 17 µs a
-- replayed letter cost). The batch marks itself with a row in
-- backstop_counted_batch for the span of its UPDATE, and both update
-- triggers skip every row while the mark is there (their WHEN tests it
-- last, so a claim or a success, which the earlier tests already skip,
-- never probes it; a death probes the empty table once). A statement may
-- set the mark only if it counts every change of every row it writes (the
-- bulk replay: each row it updates is a dead letter it picked, open, in
-- the same transaction; SQLite has one writer). The mark is deleted before
-- the transaction commits, and a failed UPDATE (a uniqueness rule: the
-- batch goes row by row) is undone with it. The counts need no
-- correction: they were exact before and stay so.

-- +goose Up
CREATE TABLE backstop_counted_batch (marked INTEGER NOT NULL);

DROP TRIGGER backstop_task_counts_update;

-- +goose StatementBegin
CREATE TRIGGER backstop_task_counts_update AFTER UPDATE OF queue, state, dlq_status ON backstop_tasks
WHEN (OLD.queue IS NOT NEW.queue OR OLD.state IS NOT NEW.state OR OLD.dlq_status IS NOT NEW.dlq_status)
    AND NOT (OLD.queue = NEW.queue AND OLD.dlq_status IS NULL AND NEW.dlq_status IS NULL
        AND ((OLD.state = 'pending' AND NEW.state = 'running') OR (OLD.state = 'running' AND NEW.state = 'succeeded')))
    AND NOT EXISTS (SELECT 1 FROM backstop_counted_batch)
BEGIN
    UPDATE backstop_task_counts SET n = n - 1
    WHERE queue = OLD.queue AND state = OLD.state AND dlq_status = COALESCE(OLD.dlq_status, '');
    INSERT INTO backstop_task_counts (queue, state, dlq_status, n)
    VALUES (NEW.queue, NEW.state, COALESCE(NEW.dlq_status, ''), 1)
    ON CONFLICT (queue, state, dlq_status) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

DROP TRIGGER backstop_dlq_group_counts_update;

-- +goose StatementBegin
CREATE TRIGGER backstop_dlq_group_counts_update AFTER UPDATE OF queue, state, dlq_status, dead_reason, last_error ON backstop_tasks
WHEN ((OLD.state = 'dead' OR NEW.state = 'dead')
    AND (OLD.queue IS NOT NEW.queue OR OLD.state IS NOT NEW.state OR OLD.dlq_status IS NOT NEW.dlq_status
        OR OLD.dead_reason IS NOT NEW.dead_reason OR substr(OLD.last_error, 1, 200) IS NOT substr(NEW.last_error, 1, 200)))
    AND NOT EXISTS (SELECT 1 FROM backstop_counted_batch)
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

-- +goose Down
DROP TRIGGER backstop_dlq_group_counts_update;

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

DROP TRIGGER backstop_task_counts_update;

-- +goose StatementBegin
CREATE TRIGGER backstop_task_counts_update AFTER UPDATE OF queue, state, dlq_status ON backstop_tasks
WHEN (OLD.queue IS NOT NEW.queue OR OLD.state IS NOT NEW.state OR OLD.dlq_status IS NOT NEW.dlq_status)
    AND NOT (OLD.queue = NEW.queue AND OLD.dlq_status IS NULL AND NEW.dlq_status IS NULL
        AND ((OLD.state = 'pending' AND NEW.state = 'running') OR (OLD.state = 'running' AND NEW.state = 'succeeded')))
BEGIN
    UPDATE backstop_task_counts SET n = n - 1
    WHERE queue = OLD.queue AND state = OLD.state AND dlq_status = COALESCE(OLD.dlq_status, '');
    INSERT INTO backstop_task_counts (queue, state, dlq_status, n)
    VALUES (NEW.queue, NEW.state, COALESCE(NEW.dlq_status, ''), 1)
    ON CONFLICT (queue, state, dlq_status) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

DROP TABLE backstop_counted_batch;
