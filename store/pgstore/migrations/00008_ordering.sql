-- Ordered processing (docs/ordering.md): each ordered task's key, sequence
-- and ordering status (held, gap, ready, admitted, stale), and each key's
-- state (last handled sequence, the one admitted task, the drain schedule).

-- +goose Up
CREATE TABLE backstop_ordering_tasks (
    task_id text PRIMARY KEY,
    queue   text NOT NULL,
    okey    text NOT NULL,
    seq     bigint NOT NULL,
    status  text NOT NULL,
    gaps    jsonb
);
CREATE INDEX backstop_ordering_tasks_open ON backstop_ordering_tasks (queue, okey, seq)
    WHERE status IN ('held', 'gap', 'ready');

CREATE TABLE backstop_ordering_keys (
    queue        text NOT NULL,
    okey         text NOT NULL,
    last_seq     bigint,
    busy_task    text,
    busy_seq     bigint NOT NULL DEFAULT 0,
    drain_due_at timestamptz,
    drain_step   integer NOT NULL DEFAULT 0,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (queue, okey)
);
CREATE INDEX backstop_ordering_keys_drain ON backstop_ordering_keys (queue, drain_due_at)
    WHERE drain_due_at IS NOT NULL;

-- +goose Down
DROP TABLE backstop_ordering_keys;
DROP TABLE backstop_ordering_tasks;
