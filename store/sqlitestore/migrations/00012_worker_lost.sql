-- Worker lifecycle events (docs/events.md): lost_at (microseconds) is when
-- the worker.heartbeat_lost event of the worker's current silence was
-- written (NULL: none; a sighting clears it), so that the event is written
-- once however many processes run maintenance.

-- +goose Up
ALTER TABLE backstop_workers ADD COLUMN lost_at INTEGER;

-- +goose Down
ALTER TABLE backstop_workers DROP COLUMN lost_at;
