-- A task's hot-path events found from the task row (docs/events.md,
-- "Storage and cost"): the GIN index on backstop_events.subjects cost the
-- hot path most of the event log's WAL (an entry per task per event row,
-- and pending-list merges inside the claim and settle statements while
-- they hold their row locks). The hot writers (enqueue's task.enqueued,
-- the claim's task.claimed, the success settle's task.started and
-- task.succeeded) now append their row's seq to the task's event_seqs in
-- the statement that writes the task row, and mark the row linked; only
-- unlinked rows (every other path, and every row written before this
-- migration) stay in the GIN index. A reader of a task's events takes the
-- unlinked rows from the GIN and the linked ones by seq (btree).
-- linked has a constant default: adding it does not rewrite the table.

-- +goose Up
ALTER TABLE backstop_tasks ADD COLUMN event_seqs bigint[];
ALTER TABLE backstop_events ADD COLUMN linked boolean NOT NULL DEFAULT false;
CREATE INDEX backstop_events_seq ON backstop_events (seq);
CREATE INDEX backstop_events_subjects_unlinked ON backstop_events USING gin (subjects) WHERE NOT linked;
DROP INDEX backstop_events_subjects;

-- +goose Down
CREATE INDEX backstop_events_subjects ON backstop_events USING gin (subjects);
DROP INDEX backstop_events_subjects_unlinked;
DROP INDEX backstop_events_seq;
ALTER TABLE backstop_events DROP COLUMN linked;
ALTER TABLE backstop_tasks DROP COLUMN event_seqs;
