-- A debounced task's settings, so its page can say when it runs at the
-- latest: the quiet period of its latest debounced enqueue (microseconds)
-- and its max-wait deadline (its first enqueue plus the max wait,
-- microseconds since the epoch; NULL: none). Both NULL on a task that is
-- not debounced. Written with the debounced insert or merge; the claim
-- never reads them.

-- +goose Up
ALTER TABLE backstop_tasks ADD COLUMN debounce_for_us INTEGER;
ALTER TABLE backstop_tasks ADD COLUMN debounce_until INTEGER;

-- +goose Down
ALTER TABLE backstop_tasks DROP COLUMN debounce_until;
ALTER TABLE backstop_tasks DROP COLUMN debounce_for_us;
