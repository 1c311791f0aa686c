package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// Workflows (docs/workflows.md): the facade over package workflow (the
// definitions and the engine's pure rules) and the store's workflow seam
// (store/workflows.go). Nothing is orchestrated in memory: a run starts in
// one transaction (its run row, its first steps' rows and tasks, its
// events), and a step's settlement advances its run in the transaction that
// settles it (settleSteps), so any process may die at any point.

// WorkflowVersion is one registered version of a workflow.
type WorkflowVersion = store.WorkflowDef

// ApplyWorkflow validates def and registers it: a definition whose plan
// hash is the latest version's is that version (created false); any other
// becomes a new version. Runs keep the version they started with.
func (c *Client) ApplyWorkflow(ctx context.Context, def *workflow.Definition) (WorkflowVersion, bool, error) {
	if def == nil {
		return WorkflowVersion{}, false, invalid("definition", "is required")
	}
	if err := def.Validate(); err != nil {
		return WorkflowVersion{}, false, invalid("definition", "%v", err)
	}
	// The workflow.applied event is written in the registration's
	// transaction, also when the definition was the latest version already.
	d, created, err := c.store.PutWorkflow(ctx, store.WorkflowDef{Name: def.Name, PlanHash: def.Hash(), Definition: def.Canonical()},
		func(d store.WorkflowDef, created bool) Event {
			return c.auditEvent(ctx, store.EventWorkflowApplied, d.Name, "", map[string]any{"version": d.Version, "plan_hash": d.PlanHash, "created": created})
		})
	if err == nil {
		c.e.RememberPlan(d.PlanHash, def)
		c.e.RememberLatest(&d)
	}
	return d, created, err
}

// Workflows lists the latest version of every registered workflow.
func (c *Client) Workflows(ctx context.Context) ([]WorkflowVersion, error) {
	return c.store.ListWorkflows(ctx)
}

// Workflow reads one version of a workflow (0: the latest).
func (c *Client) Workflow(ctx context.Context, name string, version int) (*WorkflowVersion, *workflow.Definition, error) {
	if err := workflow.ValidName(name); err != nil {
		return nil, nil, invalid("workflow", "%v", err)
	}
	if version < 0 {
		return nil, nil, invalid("version", "must not be negative")
	}
	d, err := c.store.GetWorkflow(ctx, name, version)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			if version == 0 {
				return nil, nil, fmt.Errorf("workflow %q is not registered: %w", name, ErrNotFound)
			}
			return nil, nil, fmt.Errorf("workflow %q has no version %d: %w", name, version, ErrNotFound)
		}
		return nil, nil, err
	}
	def, err := c.e.PlanOf(d)
	return d, def, err
}

// RunWorkflowParams starts a run.
type RunWorkflowParams struct {
	Workflow string
	// Version: 0 runs the latest.
	Version int
	// Input is the run's input (JSON; default {}), held to the payload rule
	// (EnqueueParams.Payload).
	Input json.RawMessage
	// RunID: default a new UUIDv7. Starting a run whose id exists is
	// ErrConflict, so a caller's own id makes a start idempotent.
	RunID string
	// Trace forces the run's trace to be sampled whatever the sampling
	// ratio (docs/observability.md, "Traces").
	Trace bool
}

// RunStarted is a started run.
type RunStarted struct {
	RunID    string         `json:"run_id"`
	Workflow string         `json:"workflow"`
	Version  int            `json:"version"`
	PlanHash string         `json:"plan_hash"`
	State    store.RunState `json:"state"`
}

// RunWorkflow starts a run of a registered workflow: its run and its first
// steps' tasks are written in one transaction.
//
// A start of the latest version (Version 0) plans from the version this
// client last saw as the latest (registered through it, or read once) and
// writes the run only if no later version was registered meanwhile, by any
// process; if one was, it reads the latest and plans again.
func (c *Client) RunWorkflow(ctx context.Context, p RunWorkflowParams) (*RunStarted, error) {
	if p.Version != 0 {
		plan, d, err := c.startPlan(ctx, p)
		if err != nil {
			return nil, err
		}
		return c.startRun(ctx, p, plan, d)
	}
	input, runID, err := c.startParams(p)
	if err != nil {
		return nil, err
	}
	if err := workflow.ValidName(p.Workflow); err != nil {
		return nil, invalid("workflow", "%v", err)
	}
	if p.Trace {
		ctx = engine.ForceTrace(ctx)
	}
	var eff engine.RunEffects
	d, plan, err := c.e.StartLatest(ctx, p.Workflow, func(d *WorkflowVersion, def *workflow.Definition) (workflow.Plan, error) {
		return c.planStart(def, d, runID, input)
	}, &eff)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("workflow %q is not registered: %w", p.Workflow, ErrNotFound)
	}
	if err != nil {
		return nil, c.runConflict(p, err)
	}
	c.e.AfterRuns(ctx, &eff)
	return &RunStarted{RunID: plan.Run.RunID, Workflow: d.Name, Version: d.Version, PlanHash: d.PlanHash, State: plan.Run.State}, nil
}

// startRun writes the start of a run of the version d that startPlan
// planned.
func (c *Client) startRun(ctx context.Context, p RunWorkflowParams, plan workflow.Plan, d *WorkflowVersion) (*RunStarted, error) {
	if p.Trace {
		ctx = engine.ForceTrace(ctx)
	}
	var eff engine.RunEffects
	if err := c.e.StartRun(ctx, plan, &eff); err != nil {
		return nil, c.runConflict(p, err)
	}
	c.e.AfterRuns(ctx, &eff)
	return &RunStarted{RunID: plan.Run.RunID, Workflow: d.Name, Version: d.Version, PlanHash: d.PlanHash, State: plan.Run.State}, nil
}

// RunWorkflowTx starts a run inside the caller's transaction tx of the
// store's driver (ts: pgstore's Txs for a pgx.Tx, sqlitestore's for a
// *sql.Tx): the run exists if and only if the caller commits — the
// transactional outbox, for plans. The caller must not use tx after an
// error but roll it back.
func RunWorkflowTx[TX any](ctx context.Context, c *Client, ts store.TxStore[TX], tx TX, p RunWorkflowParams) (*RunStarted, error) {
	plan, d, err := c.startPlan(ctx, p)
	if err != nil {
		return nil, err
	}
	if p.Trace {
		ctx = engine.ForceTrace(ctx)
	}
	// Counted when the caller's transaction is handed back: a rollback
	// after this still counts (the library cannot see the commit).
	var eff engine.RunEffects
	if err := c.e.ApplyPlan(ctx, store.Bind(ts, tx), plan, true, &eff); err != nil {
		return nil, c.runConflict(p, err)
	}
	c.e.AfterRuns(ctx, &eff)
	return &RunStarted{RunID: plan.Run.RunID, Workflow: d.Name, Version: d.Version, PlanHash: d.PlanHash, State: plan.Run.State}, nil
}

func (c *Client) runConflict(p RunWorkflowParams, err error) error {
	if p.RunID != "" && errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrStaleVersion) {
		return fmt.Errorf("run %q already exists: %w", p.RunID, ErrConflict)
	}
	return err
}

func (c *Client) startPlan(ctx context.Context, p RunWorkflowParams) (workflow.Plan, *WorkflowVersion, error) {
	input, runID, err := c.startParams(p)
	if err != nil {
		return workflow.Plan{}, nil, err
	}
	d, def, err := c.Workflow(ctx, p.Workflow, p.Version)
	if err != nil {
		return workflow.Plan{}, nil, err
	}
	plan, err := c.planStart(def, d, runID, input)
	if err != nil {
		return workflow.Plan{}, nil, err
	}
	return plan, d, nil
}

// startParams is p's input (default {}) and run id (default a new one),
// checked.
func (c *Client) startParams(p RunWorkflowParams) (json.RawMessage, string, error) {
	return startParamsOf(p, c.cfg.MaxPayloadSize)
}

// startParamsOf is startParams with the input's size bound maxInput (0:
// not checked here).
func startParamsOf(p RunWorkflowParams, maxInput int) (json.RawMessage, string, error) {
	input := p.Input
	if len(strings.TrimSpace(string(input))) == 0 {
		input = json.RawMessage(`{}`)
	}
	if err := engine.CheckJSON("input", input); err != nil {
		return nil, "", err
	}
	if maxInput > 0 && len(input) > maxInput {
		return nil, "", &ValidationError{Field: "input", TooLarge: true,
			Message: fmt.Sprintf("is %d bytes; the maximum is %d", len(input), maxInput)}
	}
	runID := p.RunID
	if runID == "" {
		runID = workflow.NewRunID()
	} else if err := workflow.ValidRunID(runID); err != nil {
		return nil, "", invalid("run_id", "%v", err)
	}
	return input, runID, nil
}

// planStart is the start of run runID of d (def) with input.
func (c *Client) planStart(def *workflow.Definition, d *WorkflowVersion, runID string, input json.RawMessage) (workflow.Plan, error) {
	plan, err := workflow.Start(def, *d, runID, input, c.now())
	if fe := (*workflow.FanOutError)(nil); errors.As(err, &fe) {
		return workflow.Plan{}, invalid("input", "%v (limits.max_fanout_bytes)", fe)
	}
	if err != nil {
		return workflow.Plan{}, invalid("input", "%v", err)
	}
	return plan, nil
}

// CancelRun cancels a run: its waiting steps are canceled, its running ones
// cooperatively, and with rollback on_fail its completed steps are
// compensated first. A finished run: ErrConflict.
func (c *Client) CancelRun(ctx context.Context, runID string) (*WorkflowRun, error) {
	if err := validRunID(runID); err != nil {
		return nil, err
	}
	// A cancel is an operator's action: its events name the actor (the
	// audit stream serves only those that do).
	ctx = store.WithActor(ctx, store.ActorFrom(ctx, store.DefaultActor))
	var eff engine.RunEffects
	err := c.store.InTx(ctx, func(tx store.Tx) error {
		eff = engine.RunEffects{}
		return c.e.AdvanceRun(ctx, tx, runID, &eff, func(def *workflow.Definition, run store.RunRecord, steps []store.StepRecord) (workflow.Plan, error) {
			if why := workflow.CancelRefused(run.State); why != "" {
				return workflow.Plan{}, fmt.Errorf("run %q is %s: %s: %w", runID, run.State, why, ErrConflict)
			}
			plan, err := workflow.Cancel(def, run, steps, c.now())
			reasonOnEvent(&plan, workflow.EventRunCanceled, store.ReasonFrom(ctx))
			return plan, err
		})
	})
	if err != nil {
		return nil, err
	}
	c.e.AfterRuns(ctx, &eff)
	return c.WorkflowRun(ctx, runID)
}

// CompleteStepParams names a step row an operator settles as succeeded.
type CompleteStepParams struct {
	RunID string
	// Step is the step's id (a dead compensation: the compensation step's).
	Step string
	// Item is the fan-out item (0 for a step without for_each).
	Item int
	// Result is the step's result (JSON, held to the handlers' result
	// rule; empty: null).
	Result json.RawMessage
	// Reason is why (required): recorded in step.force_completed and
	// step.succeeded.
	Reason string
	// Actor: who. Default: the context's actor (WithActor), else
	// "library".
	Actor string
}

// CompleteStep settles a dead or stuck step of a run as succeeded with
// p.Result, and the run goes on (workflow.CompleteStep says which rows may
// be forced and what follows): a halted run runs again, a
// compensation_failed one compensates again, the step's successors start.
// A pending step's task is canceled (asked to stop when it runs); its
// later settlement changes nothing. The step's task, when it is an open
// dead letter, is resolved once the run's transaction committed (the
// dead-letter status has no seam in the run's transaction), with a note
// naming the forced completion. Bad input: ErrInvalid; an unknown run,
// step or item: ErrNotFound; a run or row that cannot be forced:
// ErrConflict; nothing is written.
func (c *Client) CompleteStep(ctx context.Context, p CompleteStepParams) (*WorkflowRun, error) {
	if err := validRunID(p.RunID); err != nil {
		return nil, err
	}
	if p.Step == "" || !utf8.ValidString(p.Step) || len(p.Step) > 1024 {
		return nil, invalid("step", "must be a step id (1-1024 bytes of UTF-8)")
	}
	if p.Item < 0 {
		return nil, invalid("item", "must not be negative")
	}
	if strings.TrimSpace(p.Reason) == "" {
		return nil, invalid("reason", "is required to force-complete a step")
	}
	if err := c.checkReason("reason", p.Reason); err != nil {
		return nil, err
	}
	if err := engine.CheckText("actor", p.Actor); err != nil {
		return nil, err
	}
	result, err := engine.CheckResult(p.Result)
	if err != nil {
		return nil, err
	}
	actor := c.actor(store.ActorFrom(ctx, p.Actor))
	if p.Actor != "" {
		actor = p.Actor
	}
	ctx = store.WithActor(ctx, actor)
	var eff engine.RunEffects
	var forced store.StepRecord // the row as it was
	err = c.store.InTx(ctx, func(tx store.Tx) error {
		eff = engine.RunEffects{}
		now := c.now()
		err := c.e.AdvanceRun(ctx, tx, p.RunID, &eff, func(def *workflow.Definition, run store.RunRecord, steps []store.StepRecord) (workflow.Plan, error) {
			for _, r := range steps {
				if r.StepID == p.Step && r.Item == p.Item {
					forced = r
				}
			}
			return workflow.CompleteStep(def, run, steps, workflow.Force{Step: p.Step, Item: p.Item, Result: result, Reason: p.Reason}, now)
		})
		if err != nil || forced.TaskID == "" || forced.State != workflow.StepFailed {
			return err
		}
		// The step's dead letter is resolved in the same transaction, so
		// no replay can run a step the run has gone past.
		body, _ := json.Marshal(map[string]any{"reason": p.Reason, "run_id": p.RunID, "step_id": p.Step, "item": p.Item,
			"note": fmt.Sprintf("step %q item %d of run %s was force-completed", p.Step, p.Item, p.RunID)})
		_, err = tx.CloseDeadLetter(ctx, store.DLQStatusChange{ID: forced.TaskID, Status: DLQResolved, Now: now,
			Event: store.NewEvent(now, "dlq.resolved", forced.TaskID, "", "", actor, body)})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.e.AfterRuns(ctx, &eff)
	return c.WorkflowRun(ctx, p.RunID)
}

// WorkflowRun is a run as the surfaces show it: the run, and every step of
// its definition (a step not started yet is "waiting").
type WorkflowRun struct {
	store.RunRecord
	Steps []RunStep `json:"steps"`
}

// RunStep is one step of a run: its rows summed up (a fan-out step has one
// per item), with its task's attempts.
type RunStep struct {
	ID    string          `json:"id"`
	Kind  string          `json:"kind"`
	State store.StepState `json:"state"`
	// Compensate names the step's compensation step, if it has one.
	Compensate string `json:"compensate,omitempty"`
	// Compensation: the step runs only as a compensation (of
	// CompensationOf, once it ran).
	Compensation   bool     `json:"compensation,omitempty"`
	CompensationOf string   `json:"compensation_of,omitempty"`
	Needs          []string `json:"needs,omitempty"`
	// TaskID: the step's task (a fan-out step's items are in Items).
	TaskID   string          `json:"task_id,omitempty"`
	Attempts int             `json:"attempts"`
	Items    []RunStepItem   `json:"items,omitempty"`
	Error    string          `json:"error,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	// ResultBytes is the result's size; a result over 1 KiB is left out
	// of Result (read it from the step's successors' payloads or the API's
	// run step endpoint).
	ResultBytes int `json:"result_bytes,omitempty"`
}

// RunStepItem is one item of a fan-out step.
type RunStepItem struct {
	Item     int             `json:"item"`
	TaskID   string          `json:"task_id,omitempty"`
	State    store.StepState `json:"state"`
	Attempts int             `json:"attempts"`
	Error    string          `json:"error,omitempty"`
}

// StepWaiting is the state the surfaces show for a step with no row yet.
const StepWaiting = workflow.StepWaiting

const maxShownResult = 1 << 10

// WorkflowRun reads a run with its steps. Unknown: ErrNotFound.
func (c *Client) WorkflowRun(ctx context.Context, runID string) (*WorkflowRun, error) {
	if err := validRunID(runID); err != nil {
		return nil, err
	}
	attempts := map[string]int{}
	if err := c.eachRunTask(ctx, runID, func(t *Task) { attempts[t.ID] = t.Attempt }); err != nil {
		return nil, err
	}
	return c.workflowRun(ctx, runID, attempts)
}

// workflowRun is WorkflowRun with the attempt counter of each of the run's
// tasks already read (Run reads them in its own pass over the tasks).
func (c *Client) workflowRun(ctx context.Context, runID string, attemptsOf map[string]int) (*WorkflowRun, error) {
	run, rows, err := c.store.GetRun(ctx, runID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("workflow run %q: %w", runID, ErrNotFound)
		}
		return nil, err
	}
	def, err := c.e.PlanByHash(ctx, run.PlanHash)
	if err != nil {
		return nil, err
	}
	out := &WorkflowRun{RunRecord: *run}
	for _, sv := range workflow.View(def, rows) {
		st := def.Step(sv.ID)
		v := RunStep{ID: sv.ID, Kind: sv.Kind, State: sv.State, Needs: st.Needs, Compensation: sv.Compensation,
			Compensate: st.Compensate}
		fanOut := st.ForEach != "" || len(sv.Rows) > 1
		for _, r := range sv.Rows {
			if v.CompensationOf == "" {
				v.CompensationOf = r.CompensationOf
			}
			attempts := attemptsOf[r.TaskID]
			if r.Error != "" && v.Error == "" {
				v.Error = r.Error
			}
			if fanOut {
				v.Items = append(v.Items, RunStepItem{Item: r.Item, TaskID: r.TaskID, State: r.State, Attempts: attempts, Error: r.Error})
				v.Attempts += attempts
				continue
			}
			v.TaskID, v.Attempts = r.TaskID, attempts
			if len(r.Result) > 0 {
				v.ResultBytes = len(r.Result)
				if len(r.Result) <= maxShownResult {
					v.Result = r.Result
				}
			}
		}
		out.Steps = append(out.Steps, v)
	}
	return out, nil
}

// ListRunsParams filters workflow runs (newest first).
type ListRunsParams = store.RunFilter

// WorkflowRuns lists workflow runs.
func (c *Client) WorkflowRuns(ctx context.Context, f ListRunsParams) ([]store.RunRecord, error) {
	if f.Limit < 0 || f.Limit > 10000 {
		return nil, invalid("limit", "must be between 1 and 10000")
	}
	if f.Workflow != "" {
		if err := workflow.ValidName(f.Workflow); err != nil {
			return nil, invalid("workflow", "%v", err)
		}
	}
	for _, s := range f.States {
		if !workflow.ValidRunState(s) {
			return nil, invalid("state", "unknown run state %q", s)
		}
	}
	return c.store.ListRuns(ctx, f)
}

// StepInput is what a workflow step's handler receives (the payload's
// envelope, docs/workflows.md), decoded by Step.
type StepInput[In any] struct {
	Task *Task
	// Input is the run's input.
	Input In
	// Results holds the results of the steps this one needs (a fan-out
	// step's: an array of its items' results).
	Results map[string]json.RawMessage
	// Item and Index: a fan-out item's element and position.
	Item  json.RawMessage
	Index int
	// Failure: a route target's cause.
	Failure *StepFailure
	// Compensating: a compensation's step, item and result.
	Compensating *StepCompensating
}

// StepFailure is the failure a route target handles.
type StepFailure struct {
	Step  string          `json:"step"`
	Error string          `json:"error"`
	Input json.RawMessage `json:"input"`
}

// StepCompensating is what a compensation undoes.
type StepCompensating struct {
	Step   string          `json:"step"`
	Item   int             `json:"item"`
	Result json.RawMessage `json:"result"`
}

type stepEnvelope struct {
	Input        json.RawMessage            `json:"input"`
	Results      map[string]json.RawMessage `json:"results"`
	Item         json.RawMessage            `json:"item"`
	Index        int                        `json:"index"`
	Failure      *StepFailure               `json:"failure"`
	Compensating *StepCompensating          `json:"compensating"`
}

// Step adapts a typed function to a workflow step's Handler: the payload's
// envelope is decoded (the run's input into In), and fn's returned value is
// the step's result (SetResult: a value that cannot be recorded fails the
// attempt permanently). A payload that does not decode is poison.
func Step[In, Out any](fn func(ctx context.Context, s StepInput[In]) (Out, error)) Handler {
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		var env stepEnvelope
		if err := json.Unmarshal(t.Payload, &env); err != nil {
			return engine.Poison(payloadError(t.Kind, err))
		}
		in := StepInput[In]{Task: t, Results: env.Results, Item: env.Item, Index: env.Index,
			Failure: env.Failure, Compensating: env.Compensating}
		if len(env.Input) > 0 {
			if err := json.Unmarshal(env.Input, &in.Input); err != nil {
				return engine.Poison(payloadError(t.Kind, fmt.Errorf("input: %w", err)))
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return err
		}
		return SetResult(ctx, out)
	})
}
