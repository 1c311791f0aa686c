package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
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
	d, created, err := c.store.PutWorkflow(ctx, store.WorkflowDef{Name: def.Name, PlanHash: def.Hash(), Definition: def.Canonical()})
	if err == nil {
		c.plans.Store(d.PlanHash, c.limited(def))
		c.audit(ctx, store.EventWorkflowApplied, d.Name, "", map[string]any{"version": d.Version, "plan_hash": d.PlanHash, "created": created})
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
	def, err := c.plan(d)
	return d, def, err
}

// plan is the parsed definition of a registered version, cached by plan
// hash (a hash names one definition for ever).
func (c *Client) plan(d *store.WorkflowDef) (*workflow.Definition, error) {
	if def, ok := c.plans.Load(d.PlanHash); ok {
		return def.(*workflow.Definition), nil
	}
	def, err := workflow.Parse(d.Definition)
	if err != nil {
		return nil, fmt.Errorf("backstop: workflow %s version %d (plan %s) no longer parses: %w", d.Name, d.Version, d.PlanHash, err)
	}
	def = c.limited(def)
	c.plans.Store(d.PlanHash, def)
	return def, nil
}

// limited is def bound by the client's limits (Config.MaxFanOutBytes).
func (c *Client) limited(def *workflow.Definition) *workflow.Definition {
	return def.WithLimits(workflow.Limits{FanOutBytes: c.cfg.MaxFanOutBytes})
}

// planByHash is plan for a run's plan hash.
func (c *Client) planByHash(ctx context.Context, hash string) (*workflow.Definition, error) {
	if def, ok := c.plans.Load(hash); ok {
		return def.(*workflow.Definition), nil
	}
	d, err := c.store.WorkflowByHash(ctx, hash)
	if err != nil {
		return nil, fmt.Errorf("backstop: the plan %s of a run: %w", hash, err)
	}
	return c.plan(d)
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
func (c *Client) RunWorkflow(ctx context.Context, p RunWorkflowParams) (*RunStarted, error) {
	plan, d, err := c.startPlan(ctx, p)
	if err != nil {
		return nil, err
	}
	var eff runEffects
	err = c.store.InTx(ctx, func(tx store.Tx) error {
		eff = runEffects{}
		return c.applyPlan(ctx, tx, plan, true, &eff)
	})
	if err != nil {
		return nil, c.runConflict(p, err)
	}
	c.afterRuns(ctx, &eff)
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
	// Counted when the caller's transaction is handed back: a rollback
	// after this still counts (the library cannot see the commit).
	var eff runEffects
	if err := c.applyPlan(ctx, store.Bind(ts, tx), plan, true, &eff); err != nil {
		return nil, c.runConflict(p, err)
	}
	c.afterRuns(ctx, &eff)
	return &RunStarted{RunID: plan.Run.RunID, Workflow: d.Name, Version: d.Version, PlanHash: d.PlanHash, State: plan.Run.State}, nil
}

func (c *Client) runConflict(p RunWorkflowParams, err error) error {
	if p.RunID != "" && errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("run %q already exists: %w", p.RunID, ErrConflict)
	}
	return err
}

func (c *Client) startPlan(ctx context.Context, p RunWorkflowParams) (workflow.Plan, *WorkflowVersion, error) {
	input := p.Input
	if len(strings.TrimSpace(string(input))) == 0 {
		input = json.RawMessage(`{}`)
	}
	if err := checkJSON("input", input); err != nil {
		return workflow.Plan{}, nil, err
	}
	if len(input) > c.cfg.MaxPayloadSize {
		return workflow.Plan{}, nil, &ValidationError{Field: "input", TooLarge: true,
			Message: fmt.Sprintf("is %d bytes; the maximum is %d", len(input), c.cfg.MaxPayloadSize)}
	}
	runID := p.RunID
	if runID == "" {
		runID = workflow.NewRunID()
	} else if err := workflow.ValidRunID(runID); err != nil {
		return workflow.Plan{}, nil, invalid("run_id", "%v", err)
	}
	d, def, err := c.Workflow(ctx, p.Workflow, p.Version)
	if err != nil {
		return workflow.Plan{}, nil, err
	}
	plan, err := workflow.Start(def, *d, runID, input, c.now())
	if fe := (*workflow.FanOutError)(nil); errors.As(err, &fe) {
		return workflow.Plan{}, nil, invalid("input", "%v (limits.max_fanout_bytes)", fe)
	}
	if err != nil {
		return workflow.Plan{}, nil, invalid("input", "%v", err)
	}
	return plan, d, nil
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
	var eff runEffects
	err := c.store.InTx(ctx, func(tx store.Tx) error {
		eff = runEffects{}
		return c.advanceRun(ctx, tx, runID, &eff, func(def *workflow.Definition, run store.RunRecord, steps []store.StepRecord) (workflow.Plan, error) {
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
	c.afterRuns(ctx, &eff)
	return c.WorkflowRun(ctx, runID)
}

// mayBeSteps: only a task id with a '.' can be a workflow step's
// (<run_id>.<step_id>...); the default task ids (UUIDv7s) never are, so
// plain tasks never pay for the lookup.
func mayBeSteps(ss []store.Settlement) bool {
	for i := range ss {
		if strings.IndexByte(ss[i].TaskID, '.') >= 0 {
			return true
		}
	}
	return false
}

// settleSteps applies settlements and, for those that finished a workflow
// step, advances its run in the same transaction: the step's successors are
// enqueued (or its run halts, compensates, finishes) atomically with it.
func (c *Client) settleSteps(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	if !mayBeSteps(ss) {
		return c.store.Settle(ctx, ss)
	}
	var (
		oks []bool
		eff runEffects
		err error
	)
	for try := 0; ; try++ {
		err = c.store.InTx(ctx, func(tx store.Tx) error {
			var err error
			eff = runEffects{}
			if oks, err = tx.Settle(ctx, ss); err != nil {
				return err
			}
			return c.advanceSettled(ctx, tx, ss, oks, &eff)
		})
		var pe *planError
		if err == nil || !errors.As(err, &pe) || try == 3 {
			break
		}
		// A success whose result cannot be passed on (the next step's
		// payload would be refused: too large) would fail this transaction
		// for ever: the step fails permanently instead, under its policy.
		ss = failRunSuccesses(ss, pe)
	}
	if err != nil {
		return nil, err
	}
	c.afterRuns(ctx, &eff)
	return oks, nil
}

// stepChange is what a settlement means to its step (ok false: nothing,
// the task goes on: a retry, a snooze, a release).
func stepChange(s store.Settlement) (workflow.Change, bool) {
	ch := workflow.Change{TaskID: s.TaskID, Error: s.Error}
	switch s.State {
	case bt.StateSucceeded:
		ch.Outcome, ch.Result = workflow.Succeeded, s.Result
	case bt.StateDead:
		ch.Outcome = workflow.Dead
	case bt.StateCanceled:
		ch.Outcome = workflow.Canceled
		if ch.Error == "" {
			ch.Error = "canceled"
		}
	default:
		return ch, false
	}
	return ch, true
}

// advanceSettled advances the runs of the steps among the applied
// settlements, one run at a time in run id order (so two transactions lock
// runs in the same order).
func (c *Client) advanceSettled(ctx context.Context, tx store.Tx, ss []store.Settlement, oks []bool, eff *runEffects) error {
	byTask := map[string]workflow.Change{}
	var ids, retries []string
	for i, s := range ss {
		if !oks[i] || strings.IndexByte(s.TaskID, '.') < 0 {
			continue
		}
		if ch, ok := stepChange(s); ok {
			byTask[s.TaskID] = ch
			ids = append(ids, s.TaskID)
		} else if s.State == bt.StatePending || s.State == bt.StateScheduled {
			retries = append(retries, s.TaskID)
		}
	}
	if len(retries) > 0 {
		// A retry of a task whose cancel was requested (its run was
		// canceled while the attempt ran) ends it canceled in the store:
		// its step settled.
		states, err := tx.TaskStates(ctx, retries)
		if err != nil {
			return err
		}
		for _, id := range retries {
			if states[id] == bt.StateCanceled {
				byTask[id] = workflow.Change{TaskID: id, Outcome: workflow.Canceled, Error: "canceled"}
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	eff.finished = make(map[string]time.Time, len(ids))
	for _, s := range ss {
		if _, ok := byTask[s.TaskID]; ok {
			eff.finished[s.TaskID] = s.FinishedAt
		}
	}
	return c.advanceTasks(ctx, tx, ids, byTask, eff)
}

// advanceTasks feeds the changes of the step tasks among ids to their runs.
func (c *Client) advanceTasks(ctx context.Context, tx store.Tx, ids []string, byTask map[string]workflow.Change, eff *runEffects) error {
	rows, err := tx.StepsOfTasks(ctx, ids)
	if err != nil || len(rows) == 0 {
		return err
	}
	byRun := map[string][]workflow.Change{}
	// A change from a step whose row is no longer pending means its dead
	// task was replayed (same id) by a path that did not resume the run
	// (a redrive batch, or a process that died after the replay): resume
	// first, in this transaction, then advance.
	stale := map[string][]string{}
	for _, r := range rows {
		byRun[r.RunID] = append(byRun[r.RunID], byTask[r.TaskID])
		if at, ok := eff.finished[r.TaskID]; ok && r.State == workflow.StepPending && !at.IsZero() {
			// The row turned pending when its task was enqueued (or
			// replayed): the step's time from ready to settled.
			eff.durations = append(eff.durations, stepDuration{runID: r.RunID, step: r.StepID, d: at.Sub(r.UpdatedAt)})
		}
		if r.State == workflow.StepFailed && byTask[r.TaskID].Outcome != workflow.Canceled {
			stale[r.RunID] = append(stale[r.RunID], r.TaskID)
		}
	}
	// The runs are locked at once, in run id order (two transactions lock
	// runs alike), decided one by one in memory, and the plans written with
	// one statement per kind of write (planWriter): a batch advancing many
	// runs pays a few round trips, not a few per run.
	runIDs := slices.Sorted(maps.Keys(byRun))
	locked, err := tx.LockRuns(ctx, runIDs)
	if err != nil {
		return err
	}
	if len(locked) != len(runIDs) {
		for _, id := range runIDs {
			if !slices.ContainsFunc(locked, func(l store.LockedRun) bool { return l.Run.RunID == id }) {
				return fmt.Errorf("run %q: %w", id, ErrNotFound)
			}
		}
	}
	var w planWriter
	for _, l := range locked {
		id, run, steps := l.Run.RunID, l.Run, l.Steps
		def, err := c.planByHash(ctx, run.PlanHash)
		if err != nil {
			return err
		}
		if tasks := stale[id]; len(tasks) > 0 {
			plan, err := workflow.Resume(def, run, steps, tasks, c.now())
			if err != nil {
				return err
			}
			if err := c.addPlan(ctx, &w, plan, false, eff); err != nil {
				return err
			}
			run, steps = planned(run, steps, plan)
		}
		plan, err := workflow.Advance(def, run, steps, byRun[id], c.now())
		if err != nil {
			return err
		}
		if err := c.addPlan(ctx, &w, plan, false, eff); err != nil {
			return err
		}
	}
	return c.writePlans(ctx, tx, &w, eff)
}

// planned is a run and its steps as a plan leaves them (what LockRun would
// read once the plan is written).
func planned(run store.RunRecord, steps []store.StepRecord, plan workflow.Plan) (store.RunRecord, []store.StepRecord) {
	if plan.Run.RunID == "" {
		return run, steps
	}
	r := plan.Run
	run.State, run.Error, run.Seq, run.UpdatedAt, run.FinishedAt = r.State, r.Error, r.Seq, r.UpdatedAt, r.FinishedAt
	out := slices.Clone(steps)
	for _, ps := range plan.Steps {
		i := slices.IndexFunc(out, func(s store.StepRecord) bool { return s.StepID == ps.StepID && s.Item == ps.Item })
		if i >= 0 {
			out[i] = ps
		} else {
			out = append(out, ps)
		}
	}
	return run, out
}

// advanceRun locks a run in tx, asks the engine what to do, and writes it.
func (c *Client) advanceRun(ctx context.Context, tx store.Tx, runID string, eff *runEffects,
	decide func(*workflow.Definition, store.RunRecord, []store.StepRecord) (workflow.Plan, error)) error {
	run, steps, err := tx.LockRun(ctx, runID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("run %q: %w", runID, ErrNotFound)
		}
		return err
	}
	def, err := c.planByHash(ctx, run.PlanHash)
	if err != nil {
		return err
	}
	plan, err := decide(def, *run, steps)
	if err != nil {
		return err
	}
	return c.applyPlan(ctx, tx, plan, false, eff)
}

// applyPlan writes an engine plan in tx: the run (inserted when insert),
// the step rows, the tasks, the cancellations of waiting tasks, the events.
// The cancellations of running tasks go in eff (cooperative cancellation,
// requested once tx committed).
func (c *Client) applyPlan(ctx context.Context, tx store.Tx, plan workflow.Plan, insert bool, eff *runEffects) error {
	var w planWriter
	if err := c.addPlan(ctx, &w, plan, insert, eff); err != nil {
		return err
	}
	return c.writePlans(ctx, tx, &w, eff)
}

// planWriter gathers the writes of plans: written together (writePlans),
// a kind of write at a time.
type planWriter struct {
	inserts []store.RunRecord
	updates []store.RunRecord // the last of each run
	updated map[string]int
	steps   []store.StepRecord
	params  []EnqueueParams
	tasks   []*Task
	cancels []string
	events  []bt.Event
}

// addPlan adds a plan's writes to w. A plan whose tasks would be refused
// (a payload over the limit) is a planError, before anything is written.
func (c *Client) addPlan(ctx context.Context, w *planWriter, plan workflow.Plan, insert bool, eff *runEffects) error {
	if plan.Run.RunID == "" { // nothing to do
		return nil
	}
	if len(plan.Enqueue) > 0 {
		params := make([]EnqueueParams, len(plan.Enqueue))
		for i, st := range plan.Enqueue {
			params[i] = EnqueueParams{ID: st.TaskID, Queue: st.Queue, Kind: st.Kind, Payload: st.Payload,
				Priority: st.Priority, MaxAttempts: st.MaxAttempts, Timeout: st.Timeout, Retry: st.Retry,
				Attributes: st.Attributes}
		}
		tasks, err := c.prepareAll(params)
		if err != nil {
			return &planError{runID: plan.Run.RunID, err: err}
		}
		w.params, w.tasks = append(w.params, params...), append(w.tasks, tasks...)
	}
	eff.plans = append(eff.plans, plan)
	if insert {
		w.inserts = append(w.inserts, plan.Run)
	} else if i, ok := w.updated[plan.Run.RunID]; ok {
		w.updates[i] = plan.Run
	} else {
		if w.updated == nil {
			w.updated = map[string]int{}
		}
		w.updated[plan.Run.RunID] = len(w.updates)
		w.updates = append(w.updates, plan.Run)
	}
	w.steps = append(w.steps, plan.Steps...)
	w.cancels = append(w.cancels, plan.Cancel...)
	if len(plan.Events) > 0 {
		now, actor := c.now(), store.ActorFrom(ctx, "")
		for _, e := range plan.Events {
			subject := e.TaskID
			if subject == "" {
				subject = plan.Run.RunID
			}
			ev := store.NewEvent(now, e.Type, subject, "", "", actor, e.Body)
			ev.Attributes = map[string]string{RunAttribute: plan.Run.RunID, "workflow": plan.Run.Workflow}
			if e.StepID != "" {
				ev.Attributes["step_id"] = e.StepID
			}
			w.events = append(w.events, ev)
		}
	}
	return nil
}

// writePlans writes w in tx: the new runs (one statement each), then
// every plan's run updates, step rows, tasks, cancellations and events in
// one call each.
func (c *Client) writePlans(ctx context.Context, tx store.Tx, w *planWriter, eff *runEffects) error {
	for _, r := range w.inserts {
		if err := tx.InsertRun(ctx, r); err != nil {
			return err
		}
	}
	if err := tx.UpdateRuns(ctx, w.updates); err != nil {
		return err
	}
	if len(w.steps) > 0 {
		if err := tx.PutSteps(ctx, w.steps); err != nil {
			return err
		}
	}
	if len(w.tasks) > 0 {
		if _, err := tx.Enqueue(ctx, w.tasks, c.enqueueOpts(ctx, w.params, w.tasks)); err != nil {
			return err
		}
	}
	var canceled []string
	if len(w.cancels) > 0 {
		now := c.now()
		ss := make([]store.Settlement, len(w.cancels))
		for i, id := range w.cancels {
			ss[i] = store.Settlement{TaskID: id, FinishedAt: now, State: bt.StateCanceled, Error: "its run was canceled"}
		}
		oks, err := tx.Settle(ctx, ss)
		if err != nil {
			return err
		}
		for i, ok := range oks {
			if ok {
				canceled = append(canceled, w.cancels[i])
			} else {
				eff.cancels = append(eff.cancels, w.cancels[i])
			}
		}
	}
	if len(w.events) > 0 {
		if err := tx.AppendEvents(ctx, w.events); err != nil {
			return err
		}
	}
	if len(canceled) == 0 {
		return nil
	}
	// The waiting tasks are canceled: their steps settle now, in this
	// transaction (the running ones settle when their workers stop).
	byTask := make(map[string]workflow.Change, len(canceled))
	for _, id := range canceled {
		byTask[id] = workflow.Change{TaskID: id, Outcome: workflow.Canceled, Error: workflow.CanceledError}
	}
	return c.advanceTasks(ctx, tx, canceled, byTask, eff)
}

// planError: a plan's next tasks were refused (a payload over the limit).
type planError struct {
	runID string
	err   error
}

func (e *planError) Error() string {
	return fmt.Sprintf("backstop: run %s: a step's task: %v", e.runID, e.err)
}
func (e *planError) Unwrap() error { return e.err }

// failRunSuccesses turns the successes of pe's run's steps in ss into
// permanent failures naming pe's cause (a copy: ss is the caller's).
func failRunSuccesses(ss []store.Settlement, pe *planError) []store.Settlement {
	out := slices.Clone(ss)
	for i := range out {
		s := &out[i]
		if run, _, ok := strings.Cut(s.TaskID, "."); !ok || run != pe.runID || s.State != bt.StateSucceeded {
			continue
		}
		s.State, s.Outcome, s.DeadReason, s.Result = bt.StateDead, bt.OutcomePermanentError, bt.ReasonPermanentError, nil
		s.Error = "workflow: the step's result cannot be passed on to the next steps: " + pe.err.Error()
	}
	return out
}

// runEffects is what a transaction's plans leave to do once it committed:
// the running tasks to cancel, the plans to count.
type runEffects struct {
	cancels []string
	plans   []workflow.Plan
	// finished: the settled step tasks' finish times; durations: their
	// steps' time from ready to settled (workflows_telemetry.go).
	finished  map[string]time.Time
	durations []stepDuration
}

type stepDuration struct {
	runID, step string
	d           time.Duration
}

// afterRuns asks the workers of running step tasks to stop (their
// settlement as canceled then advances the run) and counts the plans
// (workflows_telemetry.go).
func (c *Client) afterRuns(ctx context.Context, eff *runEffects) {
	c.telemetry.workflowPlans(ctx, eff.plans, eff.durations)
	for _, id := range eff.cancels {
		if _, err := c.store.RequestCancel(context.WithoutCancel(ctx), id, c.now()); err != nil && !errors.Is(err, store.ErrConflict) {
			c.cfg.Logger.Warn("canceling a step of a canceled run", "task_id", id, "error", err)
		}
	}
}

// resumeRuns tells the runs of replayed step tasks (same id) that their
// dead step lives again: a run that halted failed (or compensation_failed)
// goes back to running (compensating). It runs after the replay committed;
// if this process dies in between, the step's next settlement resumes the
// run all the same (the engine accepts a change from a failed run's step).
func (c *Client) resumeRuns(ctx context.Context, ids []string) {
	var steps []string
	for _, id := range ids {
		if strings.IndexByte(id, '.') >= 0 {
			steps = append(steps, id)
		}
	}
	if len(steps) == 0 {
		return
	}
	var eff runEffects
	err := c.store.InTx(ctx, func(tx store.Tx) error {
		eff = runEffects{}
		rows, err := tx.StepsOfTasks(ctx, steps)
		if err != nil {
			return err
		}
		byRun := map[string][]string{}
		for _, r := range rows {
			byRun[r.RunID] = append(byRun[r.RunID], r.TaskID)
		}
		for _, id := range slices.Sorted(maps.Keys(byRun)) { // run id order: two transactions lock runs alike
			tasks := byRun[id]
			if err := c.advanceRun(ctx, tx, id, &eff, func(def *workflow.Definition, run store.RunRecord, steps []store.StepRecord) (workflow.Plan, error) {
				return workflow.Resume(def, run, steps, tasks, c.now())
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		c.cfg.Logger.Warn("resuming the runs of replayed steps", "tasks", len(steps), "error", err)
		return
	}
	c.afterRuns(ctx, &eff)
}

// stepCanceled advances the run of a step task an operator canceled while
// it waited (the store canceled it at once, with no settlement).
func (c *Client) stepCanceled(ctx context.Context, t *Task) {
	if t == nil || t.State != StateCanceled || strings.IndexByte(t.ID, '.') < 0 {
		return
	}
	byTask := map[string]workflow.Change{t.ID: {TaskID: t.ID, Outcome: workflow.Canceled, Error: "canceled"}}
	var eff runEffects
	err := c.store.InTx(ctx, func(tx store.Tx) error {
		eff = runEffects{}
		return c.advanceTasks(ctx, tx, []string{t.ID}, byTask, &eff)
	})
	if err != nil {
		c.cfg.Logger.Warn("advancing the run of a canceled step", "task_id", t.ID, "error", err)
		return
	}
	c.afterRuns(ctx, &eff)
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
	def, err := c.planByHash(ctx, run.PlanHash)
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
			return &poisonError{err: payloadError(t.Kind, err)}
		}
		in := StepInput[In]{Task: t, Results: env.Results, Item: env.Item, Index: env.Index,
			Failure: env.Failure, Compensating: env.Compensating}
		if len(env.Input) > 0 {
			if err := json.Unmarshal(env.Input, &in.Input); err != nil {
				return &poisonError{err: payloadError(t.Kind, fmt.Errorf("input: %w", err))}
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return err
		}
		return SetResult(ctx, out)
	})
}
