-- Execution ids from a sequence. A claim gives each claimed row a new
-- execution id: one random uuid per claim statement (its first 24
-- characters, the prefix) and 12 hex digits of this sequence's next value
-- per row, so ids read as uuids and are unique among all executions (the
-- sequence alone until it passes 2^48, the prefix beyond). A random uuid
-- per row (gen_random_uuid) was the dearest expression of the claim. The
-- cache lets a backend take a thousand values per visit to the sequence;
-- the values left unused in a cache are never needed.

-- +goose Up
CREATE SEQUENCE backstop_execution_seq CACHE 1000;

-- +goose Down
DROP SEQUENCE backstop_execution_seq;
