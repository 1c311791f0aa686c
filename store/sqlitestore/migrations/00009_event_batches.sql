-- The event log in batches (docs/events.md, "Storage and cost"): one row
-- per statement and event type instead of one row per event, as on
-- Postgres. A claim of 100 tasks writes one task.claimed row holding 100
-- events; the columns that differ per event are JSON arrays, element i
-- being the row's i-th event (from 1 in cursors). Readers expand a row in
-- Go; the cursor is 0-<seq>-<i>.
--
-- A task's events (its history, the task.<id> stream) are found through
-- two indexes, both written in the transaction of the events:
--   - backstop_tasks.event_seqs, ",<seq>,<seq>…": the log rows holding the
--     events of the hot path (task.claimed from the claim, task.started and
--     task.succeeded from the batched success settle), appended by the very
--     UPDATE that changes the task, which rewrites its row anyway. An entry
--     per event in a (subject, seq) B-tree cost the drain more than the
--     event rows themselves (entries land in the middle of the tree, next
--     to the task's earlier ones).
--   - backstop_event_subjects (subject, seq), WITHOUT ROWID: every other
--     event (enqueue, failures, DLQ operations, worker.* events …).
--
-- Existing events become one-element rows and stay readable; an old cursor
-- <seq> means "after the whole row", which for them is after their event.
-- Events the hot path wrote without an id (their id was their cursor <seq>)
-- keep that id.

-- +goose Up
CREATE TABLE backstop_events_new (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    type       TEXT NOT NULL,
    time       INTEGER NOT NULL,      -- the row's latest event time (retention)
    actor      TEXT NOT NULL DEFAULT '',
    subjects   TEXT NOT NULL,         -- JSON array of task ids (worker ids for worker.*); null: a blank
    queues     TEXT NOT NULL,         -- JSON array
    kinds      TEXT NOT NULL,         -- JSON array
    times      TEXT,                  -- JSON array of integer microseconds; NULL: every event at time
    ids        TEXT,                  -- JSON array; NULL or "": the event's id is its cursor
    attributes TEXT NOT NULL,         -- JSON array of objects (or null)
    bodies     TEXT NOT NULL          -- JSON array of objects
);
INSERT INTO backstop_events_new (seq, type, time, actor, subjects, queues, kinds, times, ids, attributes, bodies)
    SELECT seq, type, time, actor, json_array(subject), json_array(queue), json_array(kind), NULL,
        json_array(CASE WHEN id = '' THEN CAST(seq AS TEXT) ELSE id END),
        '[' || coalesce(nullif(attributes, ''), 'null') || ']', '[' || coalesce(nullif(body, ''), '{}') || ']'
    FROM backstop_events;
-- Keep the sequence where it was (a cursor past deleted events stays valid).
DELETE FROM sqlite_sequence WHERE name = 'backstop_events_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'backstop_events_new', seq FROM sqlite_sequence WHERE name = 'backstop_events';
DROP TABLE backstop_events;
ALTER TABLE backstop_events_new RENAME TO backstop_events;

CREATE TABLE backstop_event_subjects (
    subject TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (subject, seq)
) WITHOUT ROWID;
INSERT INTO backstop_event_subjects (subject, seq)
    SELECT DISTINCT j.value, e.seq FROM backstop_events e, json_each(e.subjects) j WHERE j.value IS NOT NULL;

ALTER TABLE backstop_tasks ADD COLUMN event_seqs TEXT;

-- Retention deletes rows from the oldest end; their subject entries go too.
-- +goose StatementBegin
CREATE TRIGGER backstop_events_subjects_delete AFTER DELETE ON backstop_events BEGIN
    DELETE FROM backstop_event_subjects
        WHERE seq = OLD.seq AND subject IN (SELECT value FROM json_each(OLD.subjects) WHERE value IS NOT NULL);
END;
-- +goose StatementEnd

-- +goose Down
-- Rows of one event go back to the old form; rows of several (written
-- after the migration) are dropped, as on Postgres.
DROP TRIGGER backstop_events_subjects_delete;
ALTER TABLE backstop_tasks DROP COLUMN event_seqs;
DROP TABLE backstop_event_subjects;
CREATE TABLE backstop_events_old (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL,
    time       INTEGER NOT NULL,
    type       TEXT NOT NULL,
    subject    TEXT NOT NULL,
    queue      TEXT NOT NULL DEFAULT '',
    kind       TEXT NOT NULL DEFAULT '',
    attributes TEXT,
    actor      TEXT NOT NULL DEFAULT '',
    body       TEXT NOT NULL DEFAULT '{}'
);
INSERT INTO backstop_events_old (seq, id, time, type, subject, queue, kind, attributes, actor, body)
    SELECT seq, CASE WHEN coalesce(ids ->> 0, '') = CAST(seq AS TEXT) THEN '' ELSE coalesce(ids ->> 0, '') END,
        coalesce(times ->> 0, time), type, subjects ->> 0, queues ->> 0, kinds ->> 0,
        CASE WHEN json_type(attributes, '$[0]') = 'object' THEN attributes -> 0 END, actor, coalesce(bodies -> 0, '{}')
    FROM backstop_events WHERE json_array_length(subjects) = 1 AND subjects ->> 0 IS NOT NULL;
DELETE FROM sqlite_sequence WHERE name = 'backstop_events_old';
INSERT INTO sqlite_sequence (name, seq) SELECT 'backstop_events_old', seq FROM sqlite_sequence WHERE name = 'backstop_events';
DROP TABLE backstop_events;
ALTER TABLE backstop_events_old RENAME TO backstop_events;
CREATE INDEX backstop_events_subject ON backstop_events (subject, seq);
