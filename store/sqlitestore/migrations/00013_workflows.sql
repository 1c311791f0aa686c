-- Workflows (store/workflows.go): registered definitions, runs and their
-- steps. The engine (package workflow) writes runs and steps in the
-- transactions that settle their tasks. JSON columns are TEXT, as given.
-- Times are INTEGER microseconds since the Unix epoch (UTC).
--
-- backstop_workflows: one row per version of a definition (canonical JSON,
-- its SHA-256 plan_hash). A definition registered again after another one
-- becomes a new version, so a hash may repeat within a name.
--
-- backstop_runs: one row per run; seq counts its step completions.
--
-- backstop_run_steps: one row per task of a run (a step, one item of a
-- fan-out step, a compensation), keyed by (run_id, step_id, item); task_id
-- is NULL for a step that has no task (skipped). A step with no row is
-- waiting. Runs are not deleted by retention.

-- +goose Up
CREATE TABLE backstop_workflows (
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    plan_hash  TEXT NOT NULL,
    definition TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE INDEX backstop_workflows_hash ON backstop_workflows (plan_hash);

CREATE TABLE backstop_runs (
    run_id      TEXT PRIMARY KEY,
    workflow    TEXT NOT NULL,
    version     INTEGER NOT NULL,
    plan_hash   TEXT NOT NULL,
    state       TEXT NOT NULL,
    input       TEXT,
    error       TEXT NOT NULL DEFAULT '',
    seq         INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    finished_at INTEGER
);
CREATE INDEX backstop_runs_workflow ON backstop_runs (workflow, run_id);
CREATE INDEX backstop_runs_state ON backstop_runs (state, run_id);

CREATE TABLE backstop_run_steps (
    run_id          TEXT NOT NULL,
    step_id         TEXT NOT NULL,
    item            INTEGER NOT NULL DEFAULT 0,
    task_id         TEXT UNIQUE,
    state           TEXT NOT NULL,
    result          TEXT,
    error           TEXT NOT NULL DEFAULT '',
    compensation_of TEXT NOT NULL DEFAULT '',
    completed_seq   INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (run_id, step_id, item)
);

-- +goose Down
DROP TABLE backstop_run_steps;
DROP TABLE backstop_runs;
DROP TABLE backstop_workflows;
