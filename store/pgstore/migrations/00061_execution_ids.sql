-- A claimed attempt's execution id is one random uuid's first 24
-- characters per claim and the next number of this sequence as 12 hex
-- digits (pgstore: execIDs), instead of a random uuid per row: the ids
-- still read as uuids and stay unique. Each connection caches a thousand
-- numbers, so a claim of a thousand tasks takes them without a write of
-- the sequence.

-- +goose Up
CREATE SEQUENCE backstop_execution_ids AS bigint CACHE 1000;

-- +goose Down
DROP SEQUENCE backstop_execution_ids;
