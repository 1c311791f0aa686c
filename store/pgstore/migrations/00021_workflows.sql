-- Workflows (store/workflows.go): registered definitions, runs and their
-- steps. The engine (package workflow) writes runs and steps in the
-- transactions that settle their tasks. Ids and names sort by their bytes
-- (COLLATE "C"), as on SQLite: run lists page by run_id, steps are listed
-- by step_id.
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
    name       text COLLATE "C" NOT NULL,
    version    integer NOT NULL,
    plan_hash  text NOT NULL,
    definition json NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE INDEX backstop_workflows_hash ON backstop_workflows (plan_hash);

CREATE TABLE backstop_runs (
    run_id      text COLLATE "C" PRIMARY KEY,
    workflow    text COLLATE "C" NOT NULL,
    version     integer NOT NULL,
    plan_hash   text NOT NULL,
    state       text NOT NULL,
    input       json,
    error       text NOT NULL DEFAULT '',
    seq         bigint NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    finished_at timestamptz
);
CREATE INDEX backstop_runs_workflow ON backstop_runs (workflow, run_id);
CREATE INDEX backstop_runs_state ON backstop_runs (state, run_id);

CREATE TABLE backstop_run_steps (
    run_id          text COLLATE "C" NOT NULL,
    step_id         text COLLATE "C" NOT NULL,
    item            integer NOT NULL DEFAULT 0,
    task_id         text UNIQUE,
    state           text NOT NULL,
    result          json,
    error           text NOT NULL DEFAULT '',
    compensation_of text NOT NULL DEFAULT '',
    completed_seq   bigint NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (run_id, step_id, item)
);

-- +goose Down
DROP TABLE backstop_run_steps;
DROP TABLE backstop_runs;
DROP TABLE backstop_workflows;
