-- A task's hot-path events found from the task row (docs/events.md,
-- "Storage and cost"): the GIN index on backstop_events.subjects cost the
-- hot path most of the event log's WAL (an entry per task per event row,
-- and pending-list merges inside the claim and settle statements while
-- they hold their row locks). The hot writers (enqueue's task.enqueued,
-- the claim's task.claimed, the success settle's task.started and
-- task.succeeded) give their rows a link number and append it to the
-- task's event_links in the statement that writes the task row; only rows
-- without a link (every other path, and every row written before this
-- migration) stay in the GIN index. A reader of a task's events takes the
-- unlinked rows from the GIN and the linked ones by link (btree).
-- Both new columns are NULL by default: adding them rewrites nothing.

-- +goose Up
ALTER TABLE backstop_tasks ADD COLUMN event_links bigint[];
ALTER TABLE backstop_events ADD COLUMN link bigint;
CREATE INDEX backstop_events_link ON backstop_events (link) WHERE link IS NOT NULL;
CREATE INDEX backstop_events_subjects_unlinked ON backstop_events USING gin (subjects) WHERE link IS NULL;
DROP INDEX backstop_events_subjects;

-- +goose Down
CREATE INDEX backstop_events_subjects ON backstop_events USING gin (subjects);
DROP INDEX backstop_events_subjects_unlinked;
DROP INDEX backstop_events_link;
ALTER TABLE backstop_events DROP COLUMN link;
ALTER TABLE backstop_tasks DROP COLUMN event_links;
