-- The console's counts at 100,000+ tasks (docs/benchmarks.md, the console's
-- page times). (00013 is left to the workflows migration built alongside.)
--
-- GET /v1/queues counts tasks by queue and state with a scan: 70-95 ms at
-- 200,000 tasks, inside the console's 100 ms budget. A (queue, state) index
-- made it 15 ms but cost the drain 14 % (an index entry written per enqueue
-- and moved per state change: `backstop bench -n 50000`, 56k against 65.5k
-- tasks/s, medians of 5 alternating runs): the hot path wins.
--
-- GET /v1/dlq/groups counts dead letters by reason and by error (the first
-- 200 characters): two partial indexes on dead tasks only, so only dying,
-- replays and status changes pay for them.

-- GET /v1/tasks?idempotency_key= (the console's "find by idempotency
-- key") finds finished tasks too: the unique index holds live tasks only.
-- This one holds every task enqueued with a key (only those pay for it;
-- a state change does not touch it).

-- +goose Up
CREATE INDEX backstop_tasks_dead_reason ON backstop_tasks (dlq_status, dead_reason) WHERE state = 'dead';
CREATE INDEX backstop_tasks_dead_error ON backstop_tasks (dlq_status, substr(last_error, 1, 200)) WHERE state = 'dead';
CREATE INDEX backstop_tasks_idempotency_any ON backstop_tasks (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- +goose Down
DROP INDEX backstop_tasks_idempotency_any;
DROP INDEX backstop_tasks_dead_error;
DROP INDEX backstop_tasks_dead_reason;
