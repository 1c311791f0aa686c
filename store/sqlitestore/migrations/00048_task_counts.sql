-- Tasks by queue, state and dead-letter status, kept instead of counted:
-- GET /v1/queues and /v1/counts read a few rows instead of scanning every
-- task (a grouped scan of 100,000 waiting tasks and 100,000 dead letters
-- took over a second). A trigger on each insert, delete and change of a
-- task's queue, state or dead-letter status moves its group's count in the
-- writing transaction (SQLite has one writer at a time, so a counter row
-- makes no one wait). A heartbeat or a progress report changes none of
-- those columns and fires nothing. dlq_status is '' for a task without
-- one. The maintenance service task_counts compares the counts with a
-- count of the tasks now and then, and corrects them.

-- +goose Up
CREATE TABLE backstop_task_counts (
    queue TEXT NOT NULL,
    state TEXT NOT NULL,
    dlq_status TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (queue, state, dlq_status)
) WITHOUT ROWID;

-- +goose StatementBegin
CREATE TRIGGER backstop_task_counts_insert AFTER INSERT ON backstop_tasks
BEGIN
    INSERT INTO backstop_task_counts (queue, state, dlq_status, n)
    VALUES (NEW.queue, NEW.state, COALESCE(NEW.dlq_status, ''), 1)
    ON CONFLICT (queue, state, dlq_status) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

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

-- +goose StatementBegin
CREATE TRIGGER backstop_task_counts_delete AFTER DELETE ON backstop_tasks
BEGIN
    UPDATE backstop_task_counts SET n = n - 1
    WHERE queue = OLD.queue AND state = OLD.state AND dlq_status = COALESCE(OLD.dlq_status, '');
END;
-- +goose StatementEnd

INSERT INTO backstop_task_counts (queue, state, dlq_status, n)
SELECT queue, state, COALESCE(dlq_status, ''), count(*) FROM backstop_tasks GROUP BY 1, 2, 3;

-- +goose Down
DROP TRIGGER backstop_task_counts_delete;
DROP TRIGGER backstop_task_counts_update;
DROP TRIGGER backstop_task_counts_insert;
DROP TABLE backstop_task_counts;
