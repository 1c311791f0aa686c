package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// This file is the seam's workflows (docs/workflows.md): registered
// definitions, runs and their steps. The store keeps them; the engine
// (package workflow) decides what a settled step means for its run and
// writes the consequences through the Tx in the transaction that settled
// the step, so no orchestration lives only in memory.

// WorkflowDef is one registered version of a workflow definition.
type WorkflowDef struct {
	Name    string `json:"name"`
	Version int    `json:"version"` // 1, 2, ... per name
	// PlanHash is the hex SHA-256 of Definition's canonical form (package
	// workflow computes it); unique per name.
	PlanHash   string          `json:"plan_hash"`
	Definition json.RawMessage `json:"definition"` // canonical JSON
	CreatedAt  time.Time       `json:"created_at"`
}

// RunState is a workflow run's state (package workflow's rules).
type RunState string

// StepState is a step row's state.
type StepState string

// RunRecord is one workflow run.
type RunRecord struct {
	RunID    string          `json:"run_id"`
	Workflow string          `json:"workflow"`
	Version  int             `json:"version"`
	PlanHash string          `json:"plan_hash"`
	State    RunState        `json:"state"`
	Input    json.RawMessage `json:"input"`
	// Error: why the run halted or failed (the failing step's error).
	Error string `json:"error,omitempty"`
	// Seq counts the run's step completions: each succeeded step row gets
	// the next value as its CompletedSeq (compensation runs in reverse).
	Seq        int64      `json:"seq"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Latest, on a run to insert (InsertRun, WritePlan), makes the insert
	// conditional on Version being the latest registered version of
	// Workflow when it runs: else it fails with ErrStaleVersion and the
	// transaction must roll back. A start of "the latest" planned from a
	// definition cached in the process sets it. Not stored: a run read
	// back has it false.
	Latest bool `json:"-"`
}

// ErrStaleVersion: a run insert with Latest named a version that is no
// longer its workflow's latest (another version was registered since the
// plan was made).
var ErrStaleVersion = errors.New("the workflow's latest version changed")

// RunExistsError: a run insert (InsertRun, WritePlan) named a run id that
// exists. It wraps ErrConflict; RunID names the run, so a batch start can
// say which of its runs it was.
type RunExistsError struct{ RunID string }

func (e *RunExistsError) Error() string {
	return fmt.Sprintf("%v: run %q already exists", ErrConflict, e.RunID)
}
func (e *RunExistsError) Unwrap() error { return ErrConflict }

// StepRecord is one task of a run: a step, one item of a fan-out step, or
// a compensation. Keyed by (RunID, StepID, Item); TaskID is unique when set
// (a skipped step has no task).
type StepRecord struct {
	RunID  string `json:"run_id"`
	StepID string `json:"step_id"`
	// Item is the fan-out item's index; 0 for a step without for_each and
	// for a compensation of one.
	Item   int       `json:"item"`
	TaskID string    `json:"task_id,omitempty"`
	State  StepState `json:"state"`
	// Result is the handler's JSON result once the step succeeded.
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	// CompensationOf names the step this row compensates (a compensation
	// row), else "".
	CompensationOf string `json:"compensation_of,omitempty"`
	// CompletedSeq is the run's Seq when the row succeeded (0 before).
	CompletedSeq int64     `json:"completed_seq,omitempty"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// RunFilter selects runs, newest first (by RunID descending: run ids are
// UUIDv7s, so by start).
type RunFilter struct {
	Workflow string
	States   []RunState
	// BeforeID is the cursor: runs whose id sorts before it.
	BeforeID string
	Limit    int // default 100
}

// Workflows is the store's non-transactional reads and registrations.
type Workflows interface {
	// PutWorkflow registers a definition: when the latest version of
	// d.Name has d.PlanHash, that version is returned and created is false;
	// otherwise d is stored as the latest version + 1 (Version is set by
	// the store; CreatedAt is d's when set, else the store's current time)
	// and created is true. Registering an earlier definition again makes
	// it the latest: a new version with the old hash. audit, when not nil,
	// makes the event of the registration (the version returned), written
	// in its transaction: an event the log refuses stores nothing.
	PutWorkflow(ctx context.Context, d WorkflowDef, audit func(d WorkflowDef, created bool) bt.Event) (out WorkflowDef, created bool, err error)
	// GetWorkflow reads one version (0: the latest). Unknown: ErrNotFound.
	GetWorkflow(ctx context.Context, name string, version int) (*WorkflowDef, error)
	// WorkflowByHash reads the version with that plan hash (the latest of
	// them, should a definition have been registered again). Unknown:
	// ErrNotFound.
	WorkflowByHash(ctx context.Context, hash string) (*WorkflowDef, error)
	// ListWorkflows lists the latest version of every workflow, by name.
	ListWorkflows(ctx context.Context) ([]WorkflowDef, error)
	// GetRun reads a run and its step rows (ordered by StepID, Item).
	// Unknown: ErrNotFound.
	GetRun(ctx context.Context, runID string) (*RunRecord, []StepRecord, error)
	// ListRuns lists runs by f.
	ListRuns(ctx context.Context, f RunFilter) ([]RunRecord, error)
	// StepsOfTasks returns the step rows of those task ids that are steps
	// (any order; ids that are not steps are left out).
	StepsOfTasks(ctx context.Context, taskIDs []string) ([]StepRecord, error)
	// RunInputsOfTasks returns the run's input of each of those task ids
	// that is a step row's task (ids that are not, or whose run is gone,
	// are left out). Each run's input is read once: the tasks of one run
	// share it.
	RunInputsOfTasks(ctx context.Context, taskIDs []string) (map[string]json.RawMessage, error)
	// DeleteFinishedRuns deletes up to limit runs that finished before
	// before, oldest first, with their step rows, in one transaction
	// (Postgres skips runs another transaction holds): runs in one of
	// states, and runs in one of stopped only when none of their step
	// tasks is still to settle or an open dead letter (an operator closed
	// what stopped them: nothing can resume them). Their tasks are not
	// touched (task retention deletes them by their own rules; a step task
	// whose run is gone settles as a plain task).
	DeleteFinishedRuns(ctx context.Context, states, stopped []RunState, before time.Time, limit int) (int, error)
	// RunsToWake lists up to limit runs whose wake-up (WorkflowTx.SetRunWake)
	// is at or before now, earliest first.
	RunsToWake(ctx context.Context, now time.Time, limit int) ([]string, error)
}

// LockedRun is a run LockRuns holds, with its step rows.
type LockedRun struct {
	Run   RunRecord
	Steps []StepRecord
}

// WorkflowTx is the workflow writes a transaction composes with Settle,
// Enqueue and AppendEvents (tx.go).
type WorkflowTx interface {
	// InsertRun stores a new run. An existing RunID: ErrConflict.
	InsertRun(ctx context.Context, r RunRecord) error
	// LockRun reads a run and its step rows and holds the run until the
	// transaction ends (Postgres: SELECT ... FOR UPDATE), so that two
	// transactions advancing the same run take turns. Unknown: ErrNotFound.
	LockRun(ctx context.Context, runID string) (*RunRecord, []StepRecord, error)
	// LockRuns is LockRun for many runs in two statements: it locks them
	// in run id order (as one LockRun after another in that order would)
	// and returns those that exist, in run id order, each with its step
	// rows (ordered by StepID, Item).
	LockRuns(ctx context.Context, runIDs []string) ([]LockedRun, error)
	// UpdateRun writes r's State, Error, Seq, UpdatedAt and FinishedAt.
	UpdateRun(ctx context.Context, r RunRecord) error
	// UpdateRuns is UpdateRun for many runs (each once) in one statement
	// where the driver can. An unknown run: ErrNotFound (and the
	// transaction is spoiled).
	UpdateRuns(ctx context.Context, rs []RunRecord) error
	// PutSteps inserts or replaces step rows by (RunID, StepID, Item).
	PutSteps(ctx context.Context, steps []StepRecord) error
	// SetRunWake records that the run must be planned again at at, even if
	// nothing of it settles (it replaces an earlier wake-up of the run); a
	// zero at removes the run's wake-up.
	SetRunWake(ctx context.Context, runID string, at time.Time) error
	// StepsOfTasks is Workflows.StepsOfTasks inside the transaction.
	StepsOfTasks(ctx context.Context, taskIDs []string) ([]StepRecord, error)
	// TaskStates reads the current state of those tasks (ids that are not
	// tasks are left out): a settlement's outcome as the store applied it
	// (a retry of a task whose cancel was requested ends it canceled).
	TaskStates(ctx context.Context, taskIDs []string) (map[string]bt.State, error)
	// WritePlan writes w as InsertRun (each of w.Inserts), UpdateRuns,
	// PutSteps, Enqueue (w.Tasks with w.Opts) and AppendEvents would, in
	// that order, with their errors; the enqueue's results, in w.Tasks'
	// order. A driver may send them together (Postgres: one round trip);
	// after an error the transaction must roll back.
	WritePlan(ctx context.Context, w PlanWrite) ([]EnqueueResult, error)
}

// PlanWrite is the writes of workflow plans that read nothing back
// (WorkflowTx.WritePlan), in the order they are written.
type PlanWrite struct {
	Inserts []RunRecord
	Updates []RunRecord
	Steps   []StepRecord
	Tasks   []*bt.Task
	Opts    EnqueueOpts
	// Events are written after the tasks' own (task.enqueued, Opts.Events).
	Events []bt.Event
}

// WritePlanInSteps is WorkflowTx.WritePlan one operation of ts after the
// other: the driver's WritePlan where it sends nothing together.
func WritePlanInSteps[TX any](ctx context.Context, ts TxStore[TX], tx TX, w PlanWrite) ([]EnqueueResult, error) {
	for _, r := range w.Inserts {
		if err := ts.InsertRun(ctx, tx, r); err != nil {
			return nil, err
		}
	}
	if err := ts.UpdateRuns(ctx, tx, w.Updates); err != nil {
		return nil, err
	}
	if len(w.Steps) > 0 {
		if err := ts.PutSteps(ctx, tx, w.Steps); err != nil {
			return nil, err
		}
	}
	res := []EnqueueResult{}
	if len(w.Tasks) > 0 {
		var err error
		if res, err = ts.Enqueue(ctx, tx, w.Tasks, w.Opts); err != nil {
			return nil, err
		}
	}
	if len(w.Events) > 0 {
		if err := ts.AppendEvents(ctx, tx, w.Events); err != nil {
			return nil, err
		}
	}
	return res, nil
}
