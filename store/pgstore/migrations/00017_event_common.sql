-- A row-wide part of the bodies of an event row: fields every element's
-- body has with the same value (a claim's worker and lease expiry), written
-- once instead of once per claimed task. Readers put them first in each
-- element's body (pgstore.evBody). NULL, as every row written before, adds
-- nothing. Adding a nullable column rewrites nothing.

-- +goose Up
ALTER TABLE backstop_events ADD COLUMN common json;

-- +goose Down
UPDATE backstop_events e SET common = NULL, bodies = (
    SELECT json_agg(CASE WHEN b::text = 'null' THEN b
        WHEN b::text = '{}' THEN e.common
        ELSE (left(e.common::text, -1) || ',' || substr(b::text, 2))::json END ORDER BY i)
    FROM json_array_elements(e.bodies) WITH ORDINALITY AS x(b, i))
WHERE common IS NOT NULL;
ALTER TABLE backstop_events DROP COLUMN common;
