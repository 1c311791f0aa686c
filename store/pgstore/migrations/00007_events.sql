-- The event log (docs/events.md): gap-free cursor order and subscriber
-- checkpoints. The same tables as the SQLite driver's 00006_events.sql.

-- +goose Up
-- xid is the top-level transaction that wrote the event. Readers serve only
-- events whose xid is below the oldest transaction still running
-- (pg_snapshot_xmin), ordered by (xid, seq): that prefix of the log is final,
-- so a cursor (xid, seq) never passes an event that commits later. Events
-- written before this migration keep xid 0 (they come first, in seq order).
ALTER TABLE backstop_events ADD COLUMN xid xid8 NOT NULL DEFAULT '0';
ALTER TABLE backstop_events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
-- The log's order is the primary key. Events the engine's statements write
-- store no id (a random UUID per row costs the hot path): their id is their
-- cursor. Other events keep a fresh UUID; neither needs an index (every
-- index costs each of the engine's writes).
ALTER TABLE backstop_events DROP CONSTRAINT backstop_events_id_key;
ALTER TABLE backstop_events ALTER COLUMN id SET DEFAULT '';
ALTER TABLE backstop_events DROP CONSTRAINT backstop_events_pkey;
ALTER TABLE backstop_events ADD PRIMARY KEY (xid, seq);
-- A task's events (its history, the task.<id> stream) are found by subject;
-- a hash index costs each write less than a btree on a 36-character id, and
-- a task has few events to sort.
DROP INDEX backstop_events_subject;
CREATE INDEX backstop_events_subject ON backstop_events USING hash (subject);
-- seq keeps its default CACHE 1: an event takes its number after the task
-- row's lock, so one task's events are in seq order (its history).

-- A subscriber's durable position: the cursor of the last event it
-- acknowledged.
CREATE TABLE backstop_event_checkpoints (
    name       text PRIMARY KEY,
    cursor     text NOT NULL,
    updated_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE backstop_event_checkpoints;
DROP INDEX backstop_events_subject;
CREATE INDEX backstop_events_subject ON backstop_events (subject, seq);
ALTER TABLE backstop_events DROP CONSTRAINT backstop_events_pkey;
ALTER TABLE backstop_events ADD PRIMARY KEY (seq);
ALTER TABLE backstop_events ALTER COLUMN id DROP DEFAULT;
UPDATE backstop_events SET id = xid::text || '-' || seq WHERE id = '';
ALTER TABLE backstop_events ADD CONSTRAINT backstop_events_id_key UNIQUE (id);
ALTER TABLE backstop_events DROP COLUMN xid;
