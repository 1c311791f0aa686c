-- The drain's two hot transitions are counted once per batch, not once
-- per row: a claim (pending → running) and a success (running →
-- succeeded) of a task without a dead-letter status, its queue unchanged,
-- are skipped by the update trigger, and the statement that makes them
-- moves the counts of its whole batch with one grouped upsert in the same
-- transaction (sqlitestore.moveCounts). Every writer of those two pairs
-- counts so: the claim (claimIn) is the only writer of state 'running',
-- and the settles (settleSucceeded, settleEach) the only writers of
-- 'succeeded'. Every other change still fires the trigger. The counts
-- need no correction: they were exact before and stay so.

-- +goose Up
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

-- +goose Down
DROP TRIGGER backstop_task_counts_update;

-- +goose StatementBegin
CREATE TRIGGER backstop_task_counts_update AFTER UPDATE OF queue, state, dlq_status ON backstop_tasks
WHEN OLD.queue IS NOT NEW.queue OR OLD.state IS NOT NEW.state OR OLD.dlq_status IS NOT NEW.dlq_status
BEGIN
    UPDATE backstop_task_counts SET n = n - 1
    WHERE queue = OLD.queue AND state = OLD.state AND dlq_status = COALESCE(OLD.dlq_status, '');
    INSERT INTO backstop_task_counts (queue, state, dlq_status, n)
    VALUES (NEW.queue, NEW.state, COALESCE(NEW.dlq_status, ''), 1)
    ON CONFLICT (queue, state, dlq_status) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd
