-- The console's counts by queue and state (GET /v1/queues, GET /v1/counts)
-- read indexes instead of every task. Each state is counted from a partial
-- index that holds its tasks with their queue, as an index-only scan:
-- pending from the claim index (queue, …), running from the running index
-- (queue, kind), and scheduled, buffered and dead (by dead-letter status)
-- from this one. Succeeded and canceled tasks, the history that dwarfs the
-- rest, are counted among the newest finished ones only (the finished
-- index, read from its end; store/pgstore: countsSQL).
--
-- A task pays for this index when it is scheduled (a delayed enqueue, a
-- retry's backoff), buffered, killed, or when its dead letter changes
-- status; never when it is claimed or when it succeeds (the new row of a
-- claim or a success fails the predicate, and an update of the state is
-- never HOT here, so no old entry is carried over).

-- +goose Up
CREATE INDEX backstop_tasks_counts ON backstop_tasks (queue, state, dlq_status)
    WHERE state IN ('scheduled', 'buffered', 'dead');

-- +goose Down
DROP INDEX backstop_tasks_counts;
