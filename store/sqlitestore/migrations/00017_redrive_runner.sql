-- Who runs a redrive and when it last said so (issue 17): the runner
-- records a heartbeat on the redrive while it runs and clears its name
-- when it stops; `backstop redrives resume` refuses a redrive whose
-- runner was seen recently (unless forced), so two processes never run one
-- redrive at once by mistake.

-- +goose Up
ALTER TABLE backstop_redrives ADD COLUMN runner TEXT NOT NULL DEFAULT '';
ALTER TABLE backstop_redrives ADD COLUMN heartbeat_at INTEGER;

-- +goose Down
ALTER TABLE backstop_redrives DROP COLUMN heartbeat_at;
ALTER TABLE backstop_redrives DROP COLUMN runner;
