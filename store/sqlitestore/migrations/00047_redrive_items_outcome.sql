-- The index of redrive items by outcome holds only the items a redrive
-- failed on (conflict, unprocessable, not_open): the ones a console lists
-- by outcome. A replayed item, nearly every item of a bulk redrive, is
-- written with one index entry less. Replayed items are listed by the
-- primary key (redrive_id, task_id) and counted as all of a redrive's
-- items less the failed ones (sqldialect.RedriveOutcomes).

-- +goose Up
DROP INDEX backstop_redrive_items_outcome;
CREATE INDEX backstop_redrive_items_outcome ON backstop_redrive_items (redrive_id, outcome, task_id) WHERE outcome <> 'replayed';

-- +goose Down
DROP INDEX backstop_redrive_items_outcome;
CREATE INDEX backstop_redrive_items_outcome ON backstop_redrive_items (redrive_id, outcome, task_id);
