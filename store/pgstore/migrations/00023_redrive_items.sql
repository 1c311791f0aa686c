-- Each dead letter a redrive took up and what became of it (issue 17's
-- per-item outcomes): replayed, conflict (a uniqueness rule refused it),
-- unprocessable (the patch did not apply), not_open (it was no longer an
-- open dead letter when its turn came). Written in the transaction that
-- replays the item (or advances the redrive past it). (00021 and 00022 are
-- left to the migrations built alongside.)

-- +goose Up
CREATE TABLE backstop_redrive_items (
    redrive_id text NOT NULL,
    task_id    text NOT NULL,
    outcome    text NOT NULL,
    detail     text NOT NULL DEFAULT '',
    at         timestamptz NOT NULL,
    PRIMARY KEY (redrive_id, task_id)
);
CREATE INDEX backstop_redrive_items_outcome ON backstop_redrive_items (redrive_id, outcome, task_id);

-- +goose Down
DROP TABLE backstop_redrive_items;
