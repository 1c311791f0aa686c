-- A where's equality and `in` conditions on payload fields read a GIN index
-- (jsonb_path_ops) of the dead letters' payloads instead of scanning the
-- dead letters: the SQL of a where on dead letters adds a containment,
-- backstop_payload_index(payload) @> '{"customer":{"id":7}}'
-- (internal/filter, Docs.PayloadIndex), and keeps its exact condition.
--
-- Dead letters only: an index on every task is written by every enqueue,
-- claim and settle (an update of the state is never HOT here), which cost
-- the store's drain 15-40 % on the 2-core box (docs/benchmarks.md); a task
-- pays for this one when it dies, when its dead letter changes, and never
-- on the hot path.
--
-- The payload stays json (its bytes exact); the index holds it as jsonb
-- where that is exact for the where's numeric model (every number its
-- nearest double): where each number is written with at most 15 digits
-- and no exponent, so is the one decimal of its double that has 15
-- significant digits. Every other payload is held as the marker
-- {"":1e400} (a number outside that model, so no payload held as itself
-- contains it), and a where's containment also selects the marker: a
-- spilled payload (NULL here), one with a longer number or an exponent
-- (the test reads the text, so a string holding ", 1e5" counts too), and
-- one with \u0000 or a UTF-16 surrogate escape, which jsonb refuses (in a
-- database whose encoding is not UTF8: any escape past ASCII).
--
-- The function is plain SQL, inlined where the index is written: no call,
-- no other function of this schema named (safe under any search_path).

-- +goose Up
-- +goose StatementBegin
DO $do$
DECLARE
    refused text := CASE WHEN current_setting('server_encoding') = 'UTF8'
        THEN '\\u(0000|[dD][89a-fA-F])'
        ELSE '\\u(00[89a-fA-F]|0[1-9a-fA-F]|[1-9a-fA-F]|0000)' END;
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION backstop_payload_index(p json) RETURNS jsonb
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $b$
        SELECT CASE
            WHEN p IS NULL OR p::text ~ %L THEN '{"":1e400}'::jsonb
            ELSE p::jsonb
        END
        $b$ $f$, refused || '|(^|[:,[])\s*-?[0-9.]+([0-9.]{15}|[eE])');
END
$do$;
-- +goose StatementEnd

CREATE INDEX backstop_tasks_payload ON backstop_tasks USING gin (backstop_payload_index(payload) jsonb_path_ops)
    WHERE state = 'dead';

-- +goose Down
DROP INDEX backstop_tasks_payload;
DROP FUNCTION backstop_payload_index(json);
