-- The event log in batches (docs/events.md, "Storage and cost"): one row per
-- statement and event type instead of one row per event. The claim of 100
-- tasks writes one task.claimed row holding 100 events; readers expand a
-- row with unnest(...) WITH ORDINALITY, and the cursor is (xid, seq, i).
-- Existing events become one-element rows (i = 1) and stay readable; an
-- old cursor <xid>-<seq> means "after the whole row".

-- +goose Up
DROP INDEX backstop_events_subject;
ALTER TABLE backstop_events
    ALTER COLUMN id DROP DEFAULT,
    ALTER COLUMN id DROP NOT NULL,
    ALTER COLUMN id TYPE text[] USING CASE WHEN id = '' THEN NULL ELSE ARRAY[id] END,
    ALTER COLUMN subject TYPE text[] USING ARRAY[subject],
    ALTER COLUMN queue DROP DEFAULT,
    ALTER COLUMN queue TYPE text[] USING ARRAY[queue],
    ALTER COLUMN kind DROP DEFAULT,
    ALTER COLUMN kind TYPE text[] USING ARRAY[kind],
    ALTER COLUMN attributes TYPE json USING json_build_array(attributes),
    ALTER COLUMN body DROP DEFAULT,
    ALTER COLUMN body TYPE json USING json_build_array(body),
    ADD COLUMN times timestamptz[];
ALTER TABLE backstop_events RENAME COLUMN id TO ids;
ALTER TABLE backstop_events RENAME COLUMN subject TO subjects;
ALTER TABLE backstop_events RENAME COLUMN queue TO queues;
ALTER TABLE backstop_events RENAME COLUMN kind TO kinds;
ALTER TABLE backstop_events RENAME COLUMN body TO bodies;
-- Per element: subjects[i], queues[i], kinds[i], ids[i] (NULL ids: the
-- event's id is its cursor), times[i] (NULL times: every element's time is
-- time), and the i-th element of the JSON arrays attributes and bodies
-- (json, not jsonb: json_agg of json_build_object costs the hot path less,
-- and the log is read whole). time is the row's latest event time
-- (retention deletes a row once all its events are old).
-- A claim of 2,000 tasks makes a row of several hundred KB, stored out of
-- line; pglz compression of it costs the hot statement more than all the
-- rest of its events, so lz4 where the server has it, else none.
-- +goose StatementBegin
DO $$
BEGIN
    ALTER TABLE backstop_events ALTER COLUMN subjects SET COMPRESSION lz4, ALTER COLUMN queues SET COMPRESSION lz4,
        ALTER COLUMN kinds SET COMPRESSION lz4, ALTER COLUMN attributes SET COMPRESSION lz4,
        ALTER COLUMN bodies SET COMPRESSION lz4, ALTER COLUMN ids SET COMPRESSION lz4, ALTER COLUMN times SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    ALTER TABLE backstop_events ALTER COLUMN subjects SET STORAGE EXTERNAL, ALTER COLUMN queues SET STORAGE EXTERNAL,
        ALTER COLUMN kinds SET STORAGE EXTERNAL, ALTER COLUMN attributes SET STORAGE EXTERNAL,
        ALTER COLUMN bodies SET STORAGE EXTERNAL, ALTER COLUMN ids SET STORAGE EXTERNAL, ALTER COLUMN times SET STORAGE EXTERNAL;
END
$$;
-- +goose StatementEnd
-- A task's events (its history, the task.<id> stream): a GIN index on the
-- subjects; fastupdate (the default) keeps each insert to a pending-list
-- append.
CREATE INDEX backstop_events_subjects ON backstop_events USING gin (subjects);

-- +goose Down
DROP INDEX backstop_events_subjects;
DELETE FROM backstop_events WHERE cardinality(subjects) <> 1;
ALTER TABLE backstop_events RENAME COLUMN ids TO id;
ALTER TABLE backstop_events RENAME COLUMN subjects TO subject;
ALTER TABLE backstop_events RENAME COLUMN queues TO queue;
ALTER TABLE backstop_events RENAME COLUMN kinds TO kind;
ALTER TABLE backstop_events RENAME COLUMN bodies TO body;
ALTER TABLE backstop_events
    DROP COLUMN times,
    ALTER COLUMN id TYPE text USING coalesce(id[1], ''),
    ALTER COLUMN id SET NOT NULL,
    ALTER COLUMN id SET DEFAULT '',
    ALTER COLUMN subject TYPE text USING subject[1],
    ALTER COLUMN queue TYPE text USING coalesce(queue[1], ''),
    ALTER COLUMN queue SET DEFAULT '',
    ALTER COLUMN kind TYPE text USING coalesce(kind[1], ''),
    ALTER COLUMN kind SET DEFAULT '',
    ALTER COLUMN attributes TYPE jsonb USING CASE WHEN json_typeof(attributes->0) = 'object' THEN (attributes->0)::jsonb END,
    ALTER COLUMN body TYPE jsonb USING coalesce(CASE WHEN json_typeof(body->0) = 'object' THEN (body->0)::jsonb END, '{}'),
    ALTER COLUMN body SET DEFAULT '{}';
CREATE INDEX backstop_events_subject ON backstop_events USING hash (subject);
