package engine

import (
	"cmp"
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

// Workflow runs (docs/workflows.md) are advanced here, by the pure rules
// of package workflow, through the store's workflow seam. Nothing is
// orchestrated in memory: a run starts in one transaction (ApplyPlan: its
// run row, its first steps' rows and tasks, its events), and a step's
// settlement advances its run in the transaction that settles it
// (settleSteps), so any process may die at any point.

// PlanOf is the parsed definition of a registered version, cached by plan
// hash (a hash names one definition for ever).
func (e *Engine) PlanOf(d *store.WorkflowDef) (*workflow.Definition, error) {
	if def, ok := e.plans.Load(d.PlanHash); ok {
		return def.(*workflow.Definition), nil
	}
	def, err := workflow.Parse(d.Definition)
	if err != nil {
		return nil, fmt.Errorf("backstop: workflow %s version %d (plan %s) no longer parses: %w", d.Name, d.Version, d.PlanHash, err)
	}
	def = e.Limited(def)
	e.plans.Store(d.PlanHash, def)
	return def, nil
}

// Limited is def bound by the client's limits (Config.MaxFanOutBytes).
func (e *Engine) Limited(def *workflow.Definition) *workflow.Definition {
	return def.WithLimits(workflow.Limits{FanOutBytes: e.cfg.MaxFanOutBytes})
}

// PlanByHash is plan for a run's plan hash.
func (e *Engine) PlanByHash(ctx context.Context, hash string) (*workflow.Definition, error) {
	if def, ok := e.plans.Load(hash); ok {
		return def.(*workflow.Definition), nil
	}
	d, err := e.store.WorkflowByHash(ctx, hash)
	if err != nil {
		return nil, fmt.Errorf("backstop: the plan %s of a run: %w", hash, err)
	}
	return e.PlanOf(d)
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

// runsOf are the runs the step task ids among ss can belong to (a step
// task's id is <run id>.<step id>..., and a run id has no '.'), sorted.
func runsOf(ss []store.Settlement) []string {
	var out []string
	for i := range ss {
		if run, _, ok := strings.Cut(ss[i].TaskID, "."); ok && run != "" {
			out = append(out, run)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// settleSteps applies settlements and, for those that finished a workflow
// step, advances its run in the same transaction: the step's successors are
// enqueued (or its run halts, compensates, finishes) atomically with it.
func (e *Engine) settleSteps(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	if !mayBeSteps(ss) {
		return e.store.Settle(ctx, ss)
	}
	var (
		oks []bool
		eff RunEffects
		err error
	)
	for try := 0; ; try++ {
		err = e.store.InTx(ctx, func(tx store.Tx) error {
			var err error
			eff = RunEffects{}
			e.Telemetry.noteSettled(&eff.trace, ss)
			// The runs first: a transaction takes its place in the event
			// log (Postgres: its xid) when it first locks or writes, so
			// taking the runs' locks before anything else puts the
			// transactions that advance one run in the log in the order
			// they held it: a run's history reads in the order it happened.
			// The rows read with the locks are the ones the advance plans
			// from (settling writes no step row).
			// One call for both (one round trip on Postgres): the locks
			// first, then the settle.
			var locked []store.LockedRun
			if locked, oks, err = tx.LockRunsSettle(ctx, runsOf(ss), ss); err != nil {
				return err
			}
			return e.advanceSettled(ctx, tx, ss, oks, &eff, locked)
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
	e.AfterRuns(ctx, &eff)
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
func (e *Engine) advanceSettled(ctx context.Context, tx store.Tx, ss []store.Settlement, oks []bool, eff *RunEffects, locked []store.LockedRun) error {
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
	return e.advanceTasks(ctx, tx, ids, byTask, eff, locked)
}

// advanceTasks feeds the changes of the step tasks among ids to their runs.
func (e *Engine) advanceTasks(ctx context.Context, tx store.Tx, ids []string, byTask map[string]workflow.Change, eff *RunEffects,
	prelocked []store.LockedRun) error {
	rows, err := stepsOfTasks(ctx, tx, ids, prelocked)
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
		if at, ok := eff.finished[r.TaskID]; ok && r.State == workflow.StepPending && !at.IsZero() &&
			!workflow.IsSinkMessage(r.TaskID) { // a step's message: its step was timed when its task settled
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
	locked, err := lockedRuns(ctx, tx, runIDs, prelocked)
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
		def, err := e.PlanByHash(ctx, run.PlanHash)
		if err != nil {
			return err
		}
		if tasks := stale[id]; len(tasks) > 0 {
			plan, err := workflow.Resume(def, run, steps, tasks, e.Now())
			if err != nil {
				return err
			}
			if err := e.addPlan(ctx, &w, plan, false, eff); err != nil {
				return err
			}
			run, steps = planned(run, steps, plan)
		}
		plan, err := workflow.Advance(def, run, steps, byRun[id], e.Now())
		if err != nil {
			return err
		}
		if err := e.addPlan(ctx, &w, plan, false, eff); err != nil {
			return err
		}
	}
	return e.writePlans(ctx, tx, &w, eff)
}

// stepsOfTasks are the step rows of the tasks ids: taken from prelocked
// (runs locked earlier in this transaction with their step rows, unchanged
// since: settling writes no step row) when it holds a row for every id,
// else read in tx. A batch whose runs were locked first so pays no round
// trip for them.
func stepsOfTasks(ctx context.Context, tx store.Tx, ids []string, prelocked []store.LockedRun) ([]store.StepRecord, error) {
	if len(prelocked) > 0 {
		want := make(map[string]bool, len(ids))
		for _, id := range ids {
			want[id] = true
		}
		var rows []store.StepRecord
		for _, l := range prelocked {
			for _, s := range l.Steps {
				if s.TaskID != "" && want[s.TaskID] {
					rows = append(rows, s)
				}
			}
		}
		if len(rows) == len(want) { // a task id is one step row's at most
			return rows, nil
		}
	}
	return tx.StepsOfTasks(ctx, ids)
}

// lockedRuns are the runs of runIDs (sorted), locked with their step
// rows: taken from prelocked (locked earlier in this transaction, their
// rows unchanged since) when it holds them all, else locked now.
func lockedRuns(ctx context.Context, tx store.Tx, runIDs []string, prelocked []store.LockedRun) ([]store.LockedRun, error) {
	out := make([]store.LockedRun, 0, len(runIDs))
	for _, l := range prelocked {
		if _, ok := slices.BinarySearch(runIDs, l.Run.RunID); ok {
			out = append(out, l)
		}
	}
	if len(out) == len(runIDs) {
		return out, nil // prelocked is in run id order, as LockRuns answers
	}
	return tx.LockRuns(ctx, runIDs)
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

// AdvanceRun locks a run in tx, asks the engine what to do, and writes it.
func (e *Engine) AdvanceRun(ctx context.Context, tx store.Tx, runID string, eff *RunEffects,
	decide func(*workflow.Definition, store.RunRecord, []store.StepRecord) (workflow.Plan, error)) error {
	run, steps, err := tx.LockRun(ctx, runID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("run %q: %w", runID, ErrNotFound)
		}
		return err
	}
	def, err := e.PlanByHash(ctx, run.PlanHash)
	if err != nil {
		return err
	}
	plan, err := decide(def, *run, steps)
	if err != nil {
		return err
	}
	return e.ApplyPlan(ctx, tx, plan, false, eff)
}

// ApplyPlan writes an engine plan in tx: the run (inserted when insert),
// the step rows, the tasks, the cancellations of waiting tasks, the events.
// The cancellations of running tasks go in eff (cooperative cancellation,
// requested once tx committed).
func (e *Engine) ApplyPlan(ctx context.Context, tx store.Tx, plan workflow.Plan, insert bool, eff *RunEffects) error {
	var w planWriter
	if err := e.addPlan(ctx, &w, plan, insert, eff); err != nil {
		return err
	}
	return e.writePlans(ctx, tx, &w, eff)
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
	why     map[string]string // a cancel's error, when not its run's cancel
	events  []bt.Event
	wakes   map[string]time.Time // run -> when it must be planned again
	// deadLetters: steps' tasks that become dead letters for their dead
	// messages (on_sink_fail: dead_letter).
	deadLetters []workflow.StepDeadLetter
}

// addPlan adds a plan's writes to w. A plan whose tasks would be refused
// (a payload over the limit) is a planError, before anything is written.
func (e *Engine) addPlan(ctx context.Context, w *planWriter, plan workflow.Plan, insert bool, eff *RunEffects) error {
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
		e.Telemetry.dispatchPlan(ctx, &eff.trace, plan, params, insert, e.routeFrom(ctx, plan.Run.PlanHash))
		tasks, err := e.PrepareAll(params)
		if err != nil {
			return &planError{runID: plan.Run.RunID, err: err}
		}
		w.params, w.tasks = append(w.params, params...), append(w.tasks, tasks...)
		eff.enqueued = append(eff.enqueued, tasks...)
	}
	if len(plan.Publish) > 0 {
		// The succeeded steps' results to their sinks, through the outbox:
		// written with the settlement, or not at all.
		params, err := e.sinkParams(ctx, &eff.trace, plan)
		if err == nil {
			var tasks []*Task
			if tasks, err = e.PrepareAll(params); err == nil {
				w.params, w.tasks = append(w.params, params...), append(w.tasks, tasks...)
			}
		}
		if err != nil {
			return &planError{runID: plan.Run.RunID, err: err}
		}
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
	w.deadLetters = append(w.deadLetters, plan.DeadLetter...)
	w.cancels = append(w.cancels, plan.Cancel...)
	if plan.CancelError != "" {
		if w.why == nil {
			w.why = map[string]string{}
		}
		for _, id := range plan.Cancel {
			w.why[id] = plan.CancelError
		}
	}
	if !plan.WakeAt.IsZero() {
		if w.wakes == nil {
			w.wakes = map[string]time.Time{}
		}
		w.wakes[plan.Run.RunID] = plan.WakeAt
	}
	if len(plan.Events) > 0 {
		now, actor := e.Now(), store.ActorFrom(ctx, "")
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

// writePlans writes w in tx: the new runs, every plan's run updates, step
// rows, tasks and events in one WritePlan (one round trip on Postgres),
// then the wake-ups, dead letters and cancellations; with dead letters or
// cancellations the events are written after them.
func (e *Engine) writePlans(ctx context.Context, tx store.Tx, w *planWriter, eff *RunEffects) error {
	// The events go with them unless dead letters or cancellations are
	// written between: their events come first.
	eventsLast := len(w.deadLetters) > 0 || len(w.cancels) > 0
	if _, err := tx.WritePlan(ctx, e.planWrite(ctx, w, !eventsLast)); err != nil {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(w.wakes)) {
		if err := tx.SetRunWake(ctx, id, w.wakes[id]); err != nil {
			return err
		}
	}
	if err := e.deadLetterSteps(ctx, tx, w.deadLetters, eff); err != nil {
		return err
	}
	var canceled []string
	if len(w.cancels) > 0 {
		now := e.Now()
		ss := make([]store.Settlement, len(w.cancels))
		for i, id := range w.cancels {
			ss[i] = store.Settlement{TaskID: id, FinishedAt: now, State: bt.StateCanceled, Error: cmp.Or(w.why[id], "its run was canceled")}
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
	if eventsLast && len(w.events) > 0 {
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
	return e.advanceTasks(ctx, tx, canceled, byTask, eff, nil)
}

// planWrite is w's WritePlan: with its events when withEvents.
func (e *Engine) planWrite(ctx context.Context, w *planWriter, withEvents bool) store.PlanWrite {
	pw := store.PlanWrite{Inserts: w.inserts, Updates: w.updates, Steps: w.steps}
	if len(w.tasks) > 0 {
		pw.Tasks, pw.Opts = w.tasks, e.EnqueueOpts(ctx, w.params, w.tasks)
	}
	if withEvents {
		pw.Events = w.events
	}
	return pw
}

// StartRun writes a new run's plan (ApplyPlan's writes) in a transaction
// of its own: a plan that writes only what WritePlan does (no wake-up,
// dead letter or cancellation) in one store call, on Postgres one round
// trip; any other in InTx.
func (e *Engine) StartRun(ctx context.Context, plan workflow.Plan, eff *RunEffects) error {
	if plan.WakeAt.IsZero() && len(plan.DeadLetter) == 0 && len(plan.Cancel) == 0 {
		var w planWriter
		*eff = RunEffects{}
		if err := e.addPlan(ctx, &w, plan, true, eff); err != nil {
			return err
		}
		_, err := e.store.WritePlan(ctx, e.planWrite(ctx, &w, true))
		return err
	}
	return e.store.InTx(ctx, func(tx store.Tx) error {
		*eff = RunEffects{}
		return e.ApplyPlan(ctx, tx, plan, true, eff)
	})
}

// deadLetterSteps makes each step's task a dead letter with its dead
// message's reason and error (on_sink_fail: dead_letter), and resolves the
// message's dead letter, which the step's now stands for: the DLQ holds
// one entry for the failure, the one whose replay runs the step again.
// The message keeps its attempts; the step's task keeps its handler's.
func (e *Engine) deadLetterSteps(ctx context.Context, tx store.Tx, dls []workflow.StepDeadLetter, eff *RunEffects) error {
	if len(dls) == 0 {
		return nil
	}
	now, actor := e.Now(), store.ActorFrom(ctx, "")
	for _, dl := range dls {
		body, _ := json.Marshal(map[string]any{"message_id": dl.MessageID, "sink": dl.Sink, "on_sink_fail": workflow.SinkDeadLetter})
		t, err := tx.DeadLetterAs(ctx, store.DeadLetterAs{ID: dl.TaskID, Cause: dl.MessageID, Now: now,
			Event: store.NewEvent(now, store.EventDeadLettered, dl.TaskID, "", "", actor, body)})
		if err != nil || t == nil {
			return err // nil: the step's task is not succeeded (replayed meanwhile): nothing to move
		}
		eff.deadLettered = append(eff.deadLettered, t)
		note, _ := json.Marshal(map[string]any{"note": fmt.Sprintf("the step's task %s is the dead letter (on_sink_fail: dead_letter): replay it to run the step again", dl.TaskID),
			"task_id": dl.TaskID, "step_id": dl.StepID, "item": dl.Item})
		if _, err := tx.CloseDeadLetter(ctx, store.DLQStatusChange{ID: dl.MessageID, Status: bt.DLQResolved, Now: now,
			Event: store.NewEvent(now, "dlq.resolved", dl.MessageID, "", "", actor, note)}); err != nil {
			return err
		}
	}
	return nil
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

// RunEffects is what a transaction's plans leave to do once it committed:
// the running tasks to cancel, the plans to count.
type RunEffects struct {
	cancels []string
	plans   []workflow.Plan
	// finished: the settled step tasks' finish times; durations: their
	// steps' time from ready to settled (workflows_telemetry.go).
	finished  map[string]time.Time
	durations []stepDuration
	trace     runTrace // runtrace.go
	// enqueued: the step tasks the plans enqueued (their log events).
	enqueued []*Task
	// deadLettered: the steps' tasks made dead letters by their dead
	// messages (counted as dead letters once committed).
	deadLettered []*Task
}

type stepDuration struct {
	runID, step string
	d           time.Duration
}

// AfterRuns asks the workers of running step tasks to stop (their
// settlement as canceled then advances the run) and counts the plans
// (workflows_telemetry.go).
func (e *Engine) AfterRuns(ctx context.Context, eff *RunEffects) {
	e.Telemetry.WorkflowPlans(ctx, eff.plans, eff.durations, e.defOf(ctx))
	e.Telemetry.stepsEnqueuedEvents(ctx, &eff.trace, eff.enqueued)
	e.Telemetry.runsTraced(ctx, &eff.trace, eff.plans)
	for _, t := range eff.deadLettered {
		e.Telemetry.DeadLettered(ctx, t, string(t.DeadReason))
	}
	for _, id := range eff.cancels {
		if _, err := e.store.RequestCancel(context.WithoutCancel(ctx), id, e.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
			e.cfg.Logger.Warn("canceling a step of a canceled run", "task_id", id, "error", err)
		}
	}
}

// ResumeRuns tells the runs of replayed step tasks (same id) that their
// dead step lives again: a run that halted failed (or compensation_failed)
// goes back to running (compensating). It runs after the replay committed;
// if this process dies in between, the step's next settlement resumes the
// run all the same (the engine accepts a change from a failed run's step).
func (e *Engine) ResumeRuns(ctx context.Context, ids []string) {
	var steps []string
	for _, id := range ids {
		if strings.IndexByte(id, '.') >= 0 {
			steps = append(steps, id)
		}
	}
	if len(steps) == 0 {
		return
	}
	var eff RunEffects
	err := e.store.InTx(ctx, func(tx store.Tx) error {
		eff = RunEffects{}
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
			if err := e.AdvanceRun(ctx, tx, id, &eff, func(def *workflow.Definition, run store.RunRecord, steps []store.StepRecord) (workflow.Plan, error) {
				return workflow.Resume(def, run, steps, tasks, e.Now())
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.cfg.Logger.Warn("resuming the runs of replayed steps", "tasks", len(steps), "error", err)
		return
	}
	e.AfterRuns(ctx, &eff)
}

// StepCanceled advances the run of a step task an operator canceled while
// it waited (the store canceled it at once, with no settlement).
func (e *Engine) StepCanceled(ctx context.Context, t *Task) {
	if t == nil || t.State != bt.StateCanceled || strings.IndexByte(t.ID, '.') < 0 {
		return
	}
	byTask := map[string]workflow.Change{t.ID: {TaskID: t.ID, Outcome: workflow.Canceled, Error: "canceled"}}
	var eff RunEffects
	err := e.store.InTx(ctx, func(tx store.Tx) error {
		eff = RunEffects{}
		return e.advanceTasks(ctx, tx, []string{t.ID}, byTask, &eff, nil)
	})
	if err != nil {
		e.cfg.Logger.Warn("advancing the run of a canceled step", "task_id", t.ID, "error", err)
		return
	}
	e.AfterRuns(ctx, &eff)
}

// RememberPlan caches def, just registered under hash.
func (e *Engine) RememberPlan(hash string, def *workflow.Definition) {
	e.plans.Store(hash, e.Limited(def))
}

// WakeRuns plans again, each in its own transaction, up to limit workflow
// runs whose wake-up came (a for_each budget ran out while its items
// waited for a slot, and nothing of the run settled since), and removes
// their wake-ups; a plan that needs another wake-up sets it again. A run
// that is gone only loses its wake-up. It answers how many runs it woke.
func (e *Engine) WakeRuns(ctx context.Context, limit int) (int, error) {
	ids, err := e.store.RunsToWake(ctx, e.Now(), limit)
	if err != nil {
		return 0, err
	}
	for i, id := range ids {
		var eff RunEffects
		err := e.store.InTx(ctx, func(tx store.Tx) error {
			eff = RunEffects{}
			if _, err := tx.LockRuns(ctx, []string{id}); err != nil { // the run first (settleSteps says why)
				return err
			}
			if err := tx.SetRunWake(ctx, id, time.Time{}); err != nil {
				return err
			}
			err := e.AdvanceRun(ctx, tx, id, &eff, func(def *workflow.Definition, run store.RunRecord, steps []store.StepRecord) (workflow.Plan, error) {
				return workflow.Advance(def, run, steps, nil, e.Now())
			})
			if errors.Is(err, ErrNotFound) {
				return nil
			}
			return err
		})
		if err != nil {
			return i, fmt.Errorf("waking run %s: %w", id, err)
		}
		e.AfterRuns(ctx, &eff)
	}
	return len(ids), nil
}
