-- GET /v1/tasks?idempotency_key= (the console's "find by idempotency
-- key") finds finished tasks too: the unique index holds live tasks only.
-- This one holds every task enqueued with a key (only those pay for it; a
-- state change does not touch it). (00021 is left to the workflows
-- migration built alongside.)

-- +goose Up
CREATE INDEX backstop_tasks_idempotency_any ON backstop_tasks (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- +goose Down
DROP INDEX backstop_tasks_idempotency_any;
