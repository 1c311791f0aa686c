-- Ordered processing (docs/ordering.md): each ordered task's key, sequence
-- and ordering status (held, gap, ready, admitted, stale), and each key's
-- state (last handled sequence, the one admitted task, the drain schedule).

-- +goose Up
CREATE TABLE backstop_ordering_tasks (
    task_id TEXT PRIMARY KEY,
    queue   TEXT NOT NULL,
    okey    TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    status  TEXT NOT NULL,
    gaps    TEXT                  -- JSON [{from,to}] reported with this task
);
CREATE INDEX backstop_ordering_tasks_open ON backstop_ordering_tasks (queue, okey, seq)
    WHERE status IN ('held', 'gap', 'ready');

CREATE TABLE backstop_ordering_keys (
    queue        TEXT NOT NULL,
    okey         TEXT NOT NULL,
    last_seq     INTEGER,          -- NULL: nothing handled yet
    busy_task    TEXT,             -- the admitted, still live task
    busy_seq     INTEGER NOT NULL DEFAULT 0,
    drain_due_at INTEGER,          -- NULL: no drain scheduled
    drain_step   INTEGER NOT NULL DEFAULT 0,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (queue, okey)
) WITHOUT ROWID;
CREATE INDEX backstop_ordering_keys_drain ON backstop_ordering_keys (queue, drain_due_at)
    WHERE drain_due_at IS NOT NULL;

-- +goose Down
DROP TABLE backstop_ordering_keys;
DROP TABLE backstop_ordering_tasks;
