package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Run states.
const (
	// RunRunning: steps run.
	RunRunning store.RunState = "running"
	// RunFailed: a step failed under halt with rollback manual; the run
	// waits, and replaying the dead step's task resumes it (Resume).
	RunFailed store.RunState = "failed"
	// RunCompensating: the rollback is under way: the run's running steps
	// settle first (those that succeed are undone too), then the
	// compensations of the succeeded steps run, one at a time, a step
	// undone only after every succeeded step that needed it was undone
	// (reverse dependency order, then reverse completion order).
	RunCompensating store.RunState = "compensating"
	// RunCanceling: a cancel asked the running steps to stop; the run ends
	// canceled once none of its step tasks runs (rollback manual, or a run
	// without compensations to run).
	RunCanceling store.RunState = "canceling"
	// RunCompensated: every compensation succeeded.
	RunCompensated store.RunState = "compensated"
	// RunCompensationFailed: a compensation dead-lettered; the run waits,
	// and replaying it resumes the rollback (Resume).
	RunCompensationFailed store.RunState = "compensation_failed"
	// RunSucceeded: every step succeeded or was skipped (by when, or a
	// route target nothing routed to), failures handled by routes allowed.
	RunSucceeded store.RunState = "succeeded"
	// RunPartial: the run went to the end but a step failed under
	// continue.
	RunPartial store.RunState = "partial"
	// RunCanceled: canceled (after its compensations, with rollback
	// on_fail).
	RunCanceled store.RunState = "canceled"
)

// Step row states. A step with no row is waiting (StepWaiting, shown). The
// one waiting row stored is a fan-out item held back by its step's
// concurrency: it has no task yet, and it is written once, when its step
// starts, so its UpdatedAt is the step's start (the budget counts from
// it); it becomes pending when a slot frees, failed when the budget ran
// out, skipped when another item failed (a policy other than halt), or
// canceled with its run or its run's rollback.
const (
	StepPending   store.StepState = "pending" // its task is enqueued or running
	StepSucceeded store.StepState = "succeeded"
	StepFailed    store.StepState = "failed"
	StepSkipped   store.StepState = "skipped"
	StepCanceled  store.StepState = "canceled"
	StepWaiting   store.StepState = "waiting"
)

// Finished reports whether a run in state s has ended for good:
// succeeded, partial, compensated or canceled. A failed or
// compensation_failed run has stopped but is not finished: a replay
// resumes it, and it can still be canceled.
func Finished(s store.RunState) bool { return slices.Contains(FinishedRunStates, s) }

// FinishedRunStates are the states Finished accepts: retention deletes
// runs in them (Config.Retention.Runs), never a failed or
// compensation_failed run, which a replay may still resume.
var FinishedRunStates = []store.RunState{RunSucceeded, RunPartial, RunCompensated, RunCanceled}

// StoppedRunStates are the states of a run that waits for an operator (a
// replay of its dead step resumes it): retention deletes such a run only
// once none of its step tasks is an open dead letter or still to settle.
var StoppedRunStates = []store.RunState{RunFailed, RunCompensationFailed}

// ValidRunState reports whether s is one of the run states.
func ValidRunState(s store.RunState) bool {
	switch s {
	case RunRunning, RunFailed, RunCompensating, RunCompensated, RunCompensationFailed,
		RunSucceeded, RunPartial, RunCanceled, RunCanceling:
		return true
	}
	return false
}

// Terminal reports whether no step of a run in state s will run without
// an operator (failed and compensation_failed wait for a replay).
func Terminal(s store.RunState) bool {
	return s != RunRunning && s != RunCompensating && s != RunCanceling
}

// Event types a Plan carries (stream run.<run id>). A run that ends has
// one run.finished (body "state": succeeded, partial, compensated,
// compensation_failed or canceled), except a failed run, which has
// run.halted (body "state": "failed"); a resumed run can have several.
const (
	EventRunStarted      = "run.started"
	EventStepEnqueued    = "step.enqueued"
	EventStepSucceeded   = "step.succeeded"
	EventStepFailed      = "step.failed"
	EventStepSkipped     = "step.skipped"
	EventRunHalted       = "run.halted"
	EventRunCompensating = "run.compensating"
	EventRunFinished     = "run.finished"
	EventRunResumed      = "run.resumed"
	EventRunCanceled     = "run.canceled"
	// EventRunSLAMissed: the run was still running at its SLA's deadline
	// (or ended after it): once per run. Body: sla, deadline, state.
	EventRunSLAMissed = "run.sla_missed"
	// EventStepSLAMissed: a step was unfinished at its SLA's deadline (or
	// ended after it): once per step start. Body: sla, deadline,
	// started_at.
	EventStepSLAMissed = "step.sla_missed"
	// EventStepDelivering: the task of a step with a sink under
	// on_sink_fail: halt succeeded; the step waits for its message
	// (message_id), which settles it.
	EventStepDelivering = "step.delivering"
	// EventStepDeadLettered: the message of a step under on_sink_fail:
	// dead_letter dead-lettered; the step's own task (task_id) is the
	// dead letter now, with the message's (message_id) error. Followed by
	// the step's step.failed.
	EventStepDeadLettered = "step.dead_lettered"
)

// CanceledError is a canceled run's Error: a run compensating with this
// error ends canceled rather than compensated.
const CanceledError = "run canceled"

// Task attributes of a step's task.
const (
	AttrRunID          = "run_id"
	AttrWorkflow       = "workflow"
	AttrStepID         = "step_id"
	AttrPlanHash       = "plan_hash"
	AttrStepItem       = "step_item"
	AttrCompensationOf = "compensation_of"
)

// ChangeOutcome is how a step's task settled for good (retries are not
// changes).
type ChangeOutcome string

const (
	// Succeeded: the handler returned; Change.Result is its result.
	Succeeded ChangeOutcome = "succeeded"
	// Dead: the task dead-lettered (attempts exhausted, or a permanent
	// error); Change.Error is its last error.
	Dead ChangeOutcome = "dead"
	// Canceled: the task was canceled (by itself, not with its run: a
	// run's Cancel settles its own rows).
	Canceled ChangeOutcome = "canceled"
)

// Change is a step's task that settled.
type Change struct {
	TaskID  string
	Outcome ChangeOutcome
	// Result is the handler's JSON result (Succeeded); empty means null.
	Result json.RawMessage
	// Error is the last error (Dead, Canceled).
	Error string
}

// StepTask is a task to enqueue for a step (or a fan-out item, or a
// compensation). Its id is StepTaskID's; its payload is the JSON object
//
//	{"input": <run input>, "results": {"<needed step>": <its result>, ...},
//	 "item": <the for_each element>, "index": 3,                       // fan-out items
//	 "failure": {"step": "charge", "error": "...", "input": <payload>}, // route targets
//	 "compensating": {"step": "charge", "item": 0, "result": <result>}} // compensations
//
// (a fan-out step's result is the list of its items' results; a step that
// did not succeed: null), except that a fan-out item's stores InputRef in
// place of input (WithInput puts it back); its attributes are run_id,
// workflow, step_id, plan_hash, and step_item on a fan-out item,
// compensation_of on a compensation. Zero MaxAttempts, Retry and Timeout mean the kind's or
// queue's configuration.
type StepTask struct {
	TaskID      string
	StepID      string
	Item        int
	Kind        string
	Queue       string
	Payload     json.RawMessage
	Attributes  map[string]string
	MaxAttempts int // 0: the kind's or queue's
	Retry       *bt.RetryPolicy
	Timeout     time.Duration // 0: the kind's or queue's
	Priority    int
}

// SinkMessage is a step's result published to its sink (Step.Sink): the
// topic (default "<workflow>.<step id>"), the key (default the run id),
// the result as the payload, and the step task's attributes (run_id,
// workflow, step_id, plan_hash, and step_item on a fan-out item) as the
// message's.
type SinkMessage struct {
	// ID is the message task's id when the step waits for its delivery
	// (on_sink_fail: halt): <step task id>.sink; empty: a new id.
	ID               string
	Sink, Topic, Key string
	StepID, TaskID   string
	Item             int
	Payload          json.RawMessage
	Attributes       map[string]string
}

// StepDeadLetter is a step's task that becomes a dead letter because its
// message (MessageID) did (Plan.DeadLetter).
type StepDeadLetter struct {
	TaskID, MessageID, Sink, StepID string
	Item                            int
	Error                           string
}

// Evaluation is one decision a plan took (Plan.When, Plan.Routes): the step
// it is about and its result.
type Evaluation struct {
	Step, Result string
}

// Event is an event to append to the run's stream, run.<run id>. Body is a
// JSON object with run_id and, by type, step_id, item, task_id, state,
// error.
type Event struct {
	Type   string
	StepID string
	TaskID string
	Body   json.RawMessage
}

// Plan is what the caller writes, in one transaction: Run (insert on
// Start, update otherwise), Steps (upsert by run, step and item), Enqueue,
// Cancel (task ids: cancel the waiting ones, ask the running ones to stop)
// and Events.
type Plan struct {
	Run     store.RunRecord
	Steps   []store.StepRecord
	Enqueue []StepTask
	Cancel  []string
	Events  []Event
	// CancelError is the error the tasks in Cancel settle with (empty:
	// their run was canceled).
	CancelError string

	// SkippedOnWhenError lists the steps this plan skipped because their
	// when failed to evaluate under on_when_error: treat_as_false (each
	// has a step.skipped event whose body holds when_error): what a
	// counter of when errors counts.
	SkippedOnWhenError []string
	// When lists the when conditions this plan evaluated to decide a step
	// (once per step started or skipped by it), with their result:
	// "true", "false" or "error".
	When []Evaluation
	// Routes lists the routes this plan decided: a step with a route
	// target (From) either failed, its failure routed to the target
	// (Result "taken"), or did not (the target skipped: "not_taken").
	Routes []Evaluation
	// Publish lists the messages of the steps with a sink that this plan
	// settled as succeeded: the caller writes each through the outbox (a
	// message task on the sink's queue) in the plan's transaction.
	Publish []SinkMessage
	// DeadLetter lists the steps' tasks (succeeded) that this plan makes
	// dead letters because their messages dead-lettered (on_sink_fail:
	// dead_letter): the caller moves each to the DLQ with its message's
	// reason and error, and resolves the message's dead letter, in the
	// plan's transaction.
	DeadLetter []StepDeadLetter
	// WakeAt, when not zero, is when the run must be planned again even
	// if none of its tasks settles by then (Advance with no changes): the
	// earliest deadline of a for_each budget whose items wait for a slot.
	// Each plan of a run replaces the previous one's WakeAt (zero: no
	// wake-up needed); an Advance earlier than WakeAt changes nothing.
	WakeAt time.Time
}

// Empty reports whether the plan writes nothing (the run is unchanged).
func (p *Plan) Empty() bool {
	return len(p.Steps) == 0 && len(p.Enqueue) == 0 && len(p.Cancel) == 0 && len(p.Events) == 0
}

// StepTaskID is the task id of a step, a fan-out item (item >= 0 and
// fanOut) or a compensation: <run id>.<step id>[.<item>].
func StepTaskID(runID, stepID string, item int, fanOut bool) string {
	id := runID + "." + stepID
	if fanOut {
		id += "." + strconv.Itoa(item)
	}
	return id
}

// maxTaskID is the library's bound on task ids.
const maxTaskID = 128

// Start begins a run of def (registered as d) with input: the steps with
// no needs are enqueued (or skipped, or, with an empty for_each, done).
// runID comes from NewRunID or the caller (ValidRunID).
func Start(def *Definition, d store.WorkflowDef, runID string, input json.RawMessage, now time.Time) (Plan, error) {
	prog, err := def.programs()
	if err != nil {
		return Plan{}, err
	}
	if err := ValidRunID(runID); err != nil {
		return Plan{}, err
	}
	hash := def.Hash()
	if d.PlanHash != "" && d.PlanHash != hash {
		return Plan{}, fmt.Errorf("workflow %q version %d: plan hash %s is not the definition's (%s)", d.Name, d.Version, d.PlanHash, hash)
	}
	if d.Name != "" && d.Name != def.Name {
		return Plan{}, fmt.Errorf("workflow %q: the definition is named %q", d.Name, def.Name)
	}
	for _, s := range def.Steps {
		n := len(runID) + 1 + len(s.ID)
		if s.ForEach != "" || s.Compensation {
			n += 1 + len(strconv.Itoa(MaxItems-1))
		}
		if s.Sink != "" {
			n += len(SinkTaskSuffix)
			if s.sinkPolicy() == SinkDeadLetter {
				n += 1 + len(strconv.Itoa(math.MaxInt32))
			}
		}
		if n > maxTaskID {
			return Plan{}, fmt.Errorf("run id %q is too long: the task ids of step %q would exceed %d characters", runID, s.ID, maxTaskID)
		}
	}
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if !utf8.Valid(input) || !json.Valid(input) {
		return Plan{}, errors.New("the run's input is not valid JSON")
	}
	run := store.RunRecord{RunID: runID, Workflow: def.Name, Version: d.Version, PlanHash: hash,
		State: RunRunning, Input: input, CreatedAt: now, UpdatedAt: now}
	e := newEngine(def, prog, run, nil, now)
	e.refuseFanOut = true
	e.event(EventRunStarted, "", "", map[string]any{"workflow": def.Name, "version": d.Version, "plan_hash": hash})
	if err := e.progress(); err != nil {
		return Plan{}, err
	}
	return e.result(), nil
}

// Advance applies changes (settled step tasks) to a run and decides what
// follows: the steps that became ready, skips, the failure policies, the
// compensations, the run's end. A change for a task that is not a pending
// row of the run (already applied, or unknown) changes nothing.
func Advance(def *Definition, run store.RunRecord, steps []store.StepRecord, changes []Change, now time.Time) (Plan, error) {
	prog, err := def.programs()
	if err != nil {
		return Plan{}, err
	}
	if err := checkRun(def, run); err != nil {
		return Plan{}, err
	}
	e := newEngine(def, prog, run, steps, now)
	for _, c := range changes {
		e.apply(c)
	}
	if err := e.progress(); err != nil {
		return Plan{}, err
	}
	return e.result(), nil
}

// Cancel cancels a run. The tasks of its pending steps go in Plan.Cancel
// (the caller cancels the waiting ones at once and asks the running ones
// to stop); their rows stay pending until the tasks settle, as a Change
// each: canceled, or succeeded when the task finished anyway. The steps
// not started are canceled. With rollback on_fail the run is compensating
// (Error CanceledError): once nothing runs, every succeeded step is undone
// and the run ends canceled. Otherwise it is canceling until none of its
// step tasks runs, then canceled. A run never finishes while one of its
// step tasks runs. A run that has ended (succeeded, partial, compensated,
// canceled) is left alone (an empty plan), and so is a compensation_failed
// run (CancelRefused): calling it canceled would claim a rollback that did
// not happen. A run already canceling, or compensating for a cancel, asks
// its running steps again.
func Cancel(def *Definition, run store.RunRecord, steps []store.StepRecord, now time.Time) (Plan, error) {
	prog, err := def.programs()
	if err != nil {
		return Plan{}, err
	}
	if err := checkRun(def, run); err != nil {
		return Plan{}, err
	}
	if CancelRefused(run.State) != "" {
		return Plan{Run: run}, nil
	}
	e := newEngine(def, prog, run, steps, now)
	var canceled []string
	for _, k := range e.keys() {
		if r := e.rows[k]; r.State == StepPending && r.CompensationOf == "" {
			canceled = append(canceled, r.TaskID)
		}
	}
	for i := range def.Steps {
		if s := &def.Steps[i]; !s.Compensation && len(e.byStep[s.ID]) == 0 {
			e.put(&store.StepRecord{StepID: s.ID, State: StepCanceled, Error: CanceledError})
		}
	}
	e.dropWaiting(CanceledError)
	e.plan.Cancel = canceled
	e.event(EventRunCanceled, "", "", map[string]any{"tasks": nonNil(canceled)})
	switch {
	case def.Rollback == OnFail:
		if run.State != RunCompensating {
			e.setState(RunCompensating, CanceledError)
			e.event(EventRunCompensating, "", "", map[string]any{"error": CanceledError})
		} else {
			e.run.Error = CanceledError
		}
	default:
		e.run.Error = CanceledError
		e.run.State, e.run.FinishedAt = RunCanceling, nil
	}
	if err := e.progress(); err != nil {
		return Plan{}, err
	}
	return e.result(), nil
}

// CancelRefused says why a run in state s cannot be canceled, or "" when
// it can.
func CancelRefused(s store.RunState) string {
	switch s {
	case RunSucceeded, RunPartial, RunCompensated, RunCanceled:
		return "it has ended"
	case RunCompensationFailed:
		return "its rollback stopped on a dead compensation: replay the compensation's task to finish the rollback, " +
			"or discard or resolve it (the run stays compensation_failed, as it is)"
	}
	return ""
}

// Resume is called when dead step tasks of a run were replayed (same
// ids): the rows of those that stopped the run (a step under halt, or a
// compensation) are pending again, and a failed run is running again, a
// compensation_failed one compensating again. It also takes a replay that
// comes while the run still runs or compensates (an operator who did not
// wait for the run to halt), which only makes the row pending. Other ids
// (unknown, not failed, a failure handled by continue or a route) are
// passed over; a run that ended otherwise (succeeded, partial,
// compensated, canceled), or no id matched: an empty plan.
func Resume(def *Definition, run store.RunRecord, steps []store.StepRecord, taskIDs []string, now time.Time) (Plan, error) {
	prog, err := def.programs()
	if err != nil {
		return Plan{}, err
	}
	if err := checkRun(def, run); err != nil {
		return Plan{}, err
	}
	switch run.State {
	case RunFailed, RunCompensationFailed, RunRunning, RunCompensating:
	default:
		return Plan{Run: run}, nil
	}
	e := newEngine(def, prog, run, steps, now)
	var resumed []string
	for _, id := range taskIDs {
		k, ok := e.byTask[id]
		if !ok {
			continue
		}
		r := e.rows[k]
		if r.State != StepFailed && r.State != StepCanceled || r.Error == CanceledError {
			continue // not dead, or canceled with its run
		}
		if s := e.byID[r.StepID]; s == nil || r.CompensationOf == "" && policyOf(s) != Halt {
			continue
		}
		r.State, r.Error = StepPending, ""
		e.put(r)
		resumed = append(resumed, id)
	}
	if len(resumed) == 0 {
		return Plan{Run: run}, nil
	}
	switch run.State {
	case RunFailed:
		e.run.State, e.run.Error, e.run.FinishedAt = RunRunning, "", nil
	case RunCompensationFailed:
		e.run.State, e.run.FinishedAt = RunCompensating, nil
	}
	e.event(EventRunResumed, "", "", map[string]any{"tasks": resumed, "state": e.run.State})
	if err := e.progress(); err != nil {
		return Plan{}, err
	}
	return e.result(), nil
}

type rowKey struct {
	step string
	item int
}

// checkRun refuses a definition that is not the version the run started
// with.
func checkRun(def *Definition, run store.RunRecord) error {
	if run.PlanHash != "" && run.PlanHash != def.Hash() {
		return fmt.Errorf("run %s has plan hash %s, not the definition's (%s)", run.RunID, run.PlanHash, def.Hash())
	}
	return nil
}

// engine is one decision over one run: the rows as they are, the rows it
// wrote, and the plan it builds.
type engine struct {
	def        *Definition
	prog       *compiled
	byID       map[string]*Step
	routedFrom map[string]string // route target -> the step routing to it
	run        store.RunRecord
	now        time.Time

	rows   map[rowKey]*store.StepRecord
	byStep map[string][]int // items of each step's rows, ascending
	byTask map[string]rowKey

	touched []rowKey // rows written, in order
	plan    Plan

	// refuseFanOut: a fan-out past the bound is Start's error (the run is
	// refused), not a failed step.
	refuseFanOut bool

	// sla: what the SLA checks need from before this plan (sla.go).
	sla slaBefore
}

func newEngine(def *Definition, prog *compiled, run store.RunRecord, steps []store.StepRecord, now time.Time) *engine {
	e := &engine{def: def, prog: prog, run: run, now: now,
		byID: make(map[string]*Step, len(def.Steps)), routedFrom: map[string]string{},
		rows: make(map[rowKey]*store.StepRecord, len(steps)), byStep: map[string][]int{}, byTask: map[string]rowKey{}}
	for i := range def.Steps {
		s := &def.Steps[i]
		e.byID[s.ID] = s
		if r := s.RouteTarget(); r != "" {
			e.routedFrom[r] = s.ID
		}
	}
	for _, r := range steps {
		if r.RunID != "" && r.RunID != run.RunID {
			continue
		}
		r := r
		e.index(&r)
	}
	e.sla = e.slaBefore()
	return e
}

func (e *engine) index(r *store.StepRecord) {
	k := rowKey{r.StepID, r.Item}
	if _, ok := e.rows[k]; !ok {
		items := e.byStep[r.StepID]
		i, _ := slices.BinarySearch(items, r.Item)
		e.byStep[r.StepID] = slices.Insert(items, i, r.Item)
	}
	e.rows[k] = r
	if r.TaskID != "" {
		e.byTask[r.TaskID] = k
	}
}

// put records a row as written by this plan.
func (e *engine) put(r *store.StepRecord) {
	r.RunID = e.run.RunID
	r.UpdatedAt = e.now
	k := rowKey{r.StepID, r.Item}
	if !slices.Contains(e.touched, k) {
		e.touched = append(e.touched, k)
	}
	e.index(r)
}

// keys lists the rows in (step, item) order.
func (e *engine) keys() []rowKey {
	ks := make([]rowKey, 0, len(e.rows))
	for k := range e.rows {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b rowKey) int {
		if a.step != b.step {
			if a.step < b.step {
				return -1
			}
			return 1
		}
		return a.item - b.item
	})
	return ks
}

func (e *engine) rowsOf(step string) []*store.StepRecord {
	items := e.byStep[step]
	out := make([]*store.StepRecord, len(items))
	for i, it := range items {
		out[i] = e.rows[rowKey{step, it}]
	}
	return out
}

func (e *engine) result() Plan {
	e.slaMissed()
	p := e.plan
	for _, k := range e.touched {
		p.Steps = append(p.Steps, *e.rows[k])
	}
	if !p.Empty() {
		e.run.UpdatedAt = e.now
	}
	p.Run = e.run
	p.WakeAt = earliest(e.wakeAt(), e.slaWakeAt())
	return p
}

func (e *engine) event(typ, step, task string, body map[string]any) {
	if body == nil {
		body = map[string]any{}
	}
	body["run_id"] = e.run.RunID
	body["workflow"] = e.run.Workflow
	if step != "" {
		body["step_id"] = step
	}
	if task != "" {
		body["task_id"] = task
	}
	b, err := json.Marshal(body)
	if err != nil {
		b = []byte(`{}`)
	}
	e.plan.Events = append(e.plan.Events, Event{Type: typ, StepID: step, TaskID: task, Body: b})
}

func (e *engine) setState(s store.RunState, errText string) {
	e.run.State = s
	if errText != "" {
		e.run.Error = errText
	}
}

func (e *engine) finish(s store.RunState) {
	e.run.State = s
	now := e.now
	e.run.FinishedAt = &now
	body := map[string]any{"state": s, "workflow": e.run.Workflow}
	if e.run.Error != "" {
		body["error"] = e.run.Error
	}
	e.event(EventRunFinished, "", "", body)
}

// apply records one settled task.
func (e *engine) apply(c Change) {
	k, ok := e.byTask[c.TaskID]
	if !ok {
		return
	}
	r := e.rows[k]
	if r.TaskID != c.TaskID {
		return // the row moved on to its step's message (awaitDelivery)
	}
	// A pending row settles; a row canceled with its run whose task
	// finished anyway records the success (so a rollback undoes it).
	if r.State != StepPending && (r.State != StepCanceled || c.Outcome != Succeeded) {
		return
	}
	body := map[string]any{"item": r.Item}
	if r.CompensationOf != "" {
		body["compensation_of"] = r.CompensationOf
	}
	stepTask := e.stepTaskID(r)
	delivered := c.TaskID != stepTask // the step's message settled (awaitDelivery)
	switch c.Outcome {
	case Succeeded:
		if !delivered && r.State == StepPending && e.awaitDelivery(r, c) {
			return
		}
		e.run.Seq++
		r.State, r.Error, r.CompletedSeq = StepSucceeded, "", e.run.Seq
		if !delivered {
			r.Result = jsonOrString(c.Result)
		} // else the result is the step's, kept while its message was delivered
		e.put(r)
		e.event(EventStepSucceeded, r.StepID, r.TaskID, body)
		if !delivered {
			e.publish(r, "")
		}
	case Dead, Canceled:
		if delivered && c.Outcome == Dead && e.def.Step(r.StepID).sinkPolicy() == SinkDeadLetter {
			// The step's own task is the dead letter: a replay of it runs
			// the handler again (Resume), under its id.
			r.TaskID = stepTask
			e.plan.DeadLetter = append(e.plan.DeadLetter, StepDeadLetter{TaskID: stepTask, MessageID: c.TaskID,
				Sink: e.def.Step(r.StepID).Sink, StepID: r.StepID, Item: r.Item, Error: c.Error})
			e.event(EventStepDeadLettered, r.StepID, stepTask, map[string]any{"item": r.Item, "message_id": c.TaskID,
				"sink": e.def.Step(r.StepID).Sink, "error": c.Error})
		}
		r.State, r.Error = StepFailed, c.Error
		if c.Outcome == Canceled {
			r.State = StepCanceled
			switch {
			case e.canceled():
				r.Error = CanceledError // stopped by its run's cancel
			case r.Error == "":
				r.Error = "canceled"
			}
		}
		e.put(r)
		body["state"], body["error"] = r.State, r.Error
		e.event(EventStepFailed, r.StepID, r.TaskID, body)
	}
}

// awaitDelivery: the task of a step with a sink under on_sink_fail: halt
// succeeded. The row keeps the result and stays pending, its task now the
// step's message (<step task id>.sink), published in this plan: the row
// settles when the message does (succeeded when delivered, failed when it
// dead-letters), so the steps that need it wait for the delivery.
func (e *engine) awaitDelivery(r *store.StepRecord, c Change) bool {
	s := e.def.Step(r.StepID)
	if s == nil || s.Sink == "" || r.CompensationOf != "" || s.sinkPolicy() == SinkContinue {
		return false
	}
	stepTask := r.TaskID
	r.Result = jsonOrString(c.Result)
	r.TaskID = stepTask + SinkTaskSuffix
	if s.sinkPolicy() == SinkDeadLetter {
		// Each publication is a new message (a replayed step's result is
		// a new one): its id takes the run's next Seq.
		e.run.Seq++
		r.TaskID += "." + strconv.FormatInt(e.run.Seq, 10)
	}
	e.put(r)
	e.event(EventStepDelivering, r.StepID, stepTask, map[string]any{"item": r.Item, "message_id": r.TaskID, "sink": s.Sink})
	e.publish(r, r.TaskID)
	return true
}

// publish adds the message of a succeeded row of a step with a sink: id
// is its task id when the step waits for it (awaitDelivery), "" (a new
// id) when not.
func (e *engine) publish(r *store.StepRecord, id string) {
	s := e.def.Step(r.StepID)
	if s == nil || s.Sink == "" || r.CompensationOf != "" {
		return
	}
	attrs := map[string]string{AttrRunID: e.run.RunID, AttrWorkflow: e.run.Workflow, AttrStepID: s.ID, AttrPlanHash: e.run.PlanHash}
	if s.ForEach != "" {
		attrs[AttrStepItem] = strconv.Itoa(r.Item)
	}
	topic := s.SinkTopic
	if topic == "" {
		topic = e.run.Workflow + "." + s.ID
	}
	key := s.SinkKey
	if key == "" {
		key = e.run.RunID
	}
	e.plan.Publish = append(e.plan.Publish, SinkMessage{ID: id, Sink: s.Sink, Topic: topic, Key: key, StepID: s.ID,
		TaskID: e.stepTaskID(r), Item: r.Item, Payload: r.Result, Attributes: attrs})
}

// stepTaskID is the id of the task of a row's step (the row's TaskID may
// be its message's, awaitDelivery); a compensation row's is its TaskID.
func (e *engine) stepTaskID(r *store.StepRecord) string {
	s := e.def.Step(r.StepID)
	if s == nil || s.Sink == "" || r.CompensationOf != "" {
		return r.TaskID
	}
	return StepTaskID(e.run.RunID, r.StepID, r.Item, s.ForEach != "")
}

// jsonOrString keeps a result that is JSON, and stores anything else as a
// JSON string (a handler's bad result must not block its run).
func jsonOrString(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if utf8.Valid(b) && json.Valid(b) {
		return slices.Clone(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

type status int

const (
	stNone status = iota
	stPending
	stSucceeded
	stFailed
	stSkipped
)

// status is a normal step's state over its rows (a fan-out step: any item
// failed is failed, then any pending is pending), and its first failed
// row.
func (e *engine) status(step string) (status, *store.StepRecord) {
	rows := e.rowsOf(step)
	if len(rows) == 0 {
		return stNone, nil
	}
	pending, skipped := false, false
	for _, r := range rows {
		switch r.State {
		case StepFailed, StepCanceled:
			return stFailed, r
		case StepPending, StepWaiting:
			pending = true
		case StepSkipped:
			skipped = true
		}
	}
	switch {
	case pending:
		return stPending, nil
	case skipped:
		return stSkipped, nil
	}
	return stSucceeded, nil
}

func policyOf(s *Step) string {
	if s.OnFailure == "" {
		return Halt
	}
	return s.OnFailure
}

// haltRow is the first failed row of a step under halt, or nil.
func (e *engine) haltRow() *store.StepRecord {
	for i := range e.def.Steps {
		s := &e.def.Steps[i]
		if s.Compensation || policyOf(s) != Halt {
			continue
		}
		if st, r := e.status(s.ID); st == stFailed {
			return r
		}
	}
	return nil
}

func (e *engine) anyPending(compensations bool) bool {
	for _, r := range e.rows {
		if r.State == StepPending && (compensations || r.CompensationOf == "") {
			return true
		}
	}
	return false
}

type need int

const (
	needReady need = iota
	needWait
	needSkip
)

// needOf is what need n means for step s: ready, wait, or skip s.
func (e *engine) needOf(s *Step, n string) need {
	st, _ := e.status(n)
	switch st {
	case stSucceeded:
		return needReady
	case stSkipped:
		// A route target nothing routed to (its step succeeded) does not
		// hold back the steps that need it.
		if from, ok := e.routedFrom[n]; ok {
			if fs, _ := e.status(from); fs == stSucceeded {
				return needReady
			}
		}
		return needSkip
	case stFailed:
		ns := e.byID[n]
		switch {
		case policyOf(ns) == Halt:
			// The run halts; replaying the dead step may resume it.
			return needWait
		case ns.RouteTarget() != "" && slices.Contains(s.Needs, ns.RouteTarget()):
			// A failure routed to R: a step that needs R too waits for it.
			return needReady
		}
		return needSkip
	}
	return needWait
}

// progress starts, skips and fails what can be decided, until nothing
// changes, then moves the run's state.
func (e *engine) progress() error {
	for e.run.State == RunRunning {
		moved := false
		halted := e.haltRow() != nil
		for i := range e.def.Steps {
			s := &e.def.Steps[i]
			if s.Compensation {
				continue
			}
			var did bool
			var err error
			if len(e.byStep[s.ID]) > 0 {
				did, err = e.feed(s, halted)
			} else {
				did, err = e.decide(s, halted)
			}
			if err != nil {
				return err
			}
			if did {
				moved = true
				halted = e.haltRow() != nil
			}
		}
		if !moved {
			break
		}
	}
	switch e.run.State {
	case RunRunning:
		return e.settleRunning()
	case RunCompensating:
		return e.compensate()
	case RunCanceling:
		if !e.anyPending(true) {
			e.finish(RunCanceled)
		}
	}
	return nil
}

// canceled reports whether the run was canceled (it is canceling, or
// compensating for a cancel).
func (e *engine) canceled() bool {
	return e.run.State == RunCanceling || e.run.State == RunCompensating && e.run.Error == CanceledError
}

// decide starts, skips or fails step s if it can be decided now.
func (e *engine) decide(s *Step, halted bool) (bool, error) {
	if from, ok := e.routedFrom[s.ID]; ok {
		st, failed := e.status(from)
		switch st {
		case stSucceeded, stSkipped:
			e.skip(s, fmt.Sprintf("not routed to: step %q did not fail", from))
			e.plan.Routes = append(e.plan.Routes, Evaluation{Step: from, Result: "not_taken"})
			return true, nil
		case stFailed:
			if halted {
				return false, nil
			}
			e.plan.Routes = append(e.plan.Routes, Evaluation{Step: from, Result: "taken"})
			return true, e.startRoute(s, from, failed)
		}
		return false, nil
	}
	ready := true
	for _, n := range s.Needs {
		switch e.needOf(s, n) {
		case needSkip:
			e.skip(s, fmt.Sprintf("needs step %q, which did not succeed", n))
			return true, nil
		case needWait:
			ready = false
		}
	}
	if !ready || halted {
		return false, nil
	}
	return true, e.startStep(s)
}

func (e *engine) skip(s *Step, why string) {
	r := &store.StepRecord{StepID: s.ID, State: StepSkipped, Error: why}
	e.put(r)
	body := map[string]any{"reason": why}
	if why == whenFalse {
		body["when"] = false // the condition was evaluated, and did not hold
	}
	e.event(EventStepSkipped, s.ID, "", body)
}

const whenFalse = "when is false"

// skipOnWhenError skips s whose when failed to evaluate (on_when_error:
// treat_as_false), keeping the error on its row and event.
func (e *engine) skipOnWhenError(s *Step, err error) {
	why := fmt.Sprintf("%v (on_when_error: %s)", err, WhenErrorFalse)
	e.put(&store.StepRecord{StepID: s.ID, State: StepSkipped, Error: why})
	e.event(EventStepSkipped, s.ID, "", map[string]any{"reason": why, "when_error": err.Error()})
	e.plan.SkippedOnWhenError = append(e.plan.SkippedOnWhenError, s.ID)
}

// whenError is an error evaluating a step's when (not its for_each).
type whenError struct{ err error }

func (w *whenError) Error() string { return w.err.Error() }
func (w *whenError) Unwrap() error { return w.err }

// fail records a step that failed before it had a task (an expression's
// error): a permanent failure, under the step's policy.
func (e *engine) fail(s *Step, err error) {
	r := &store.StepRecord{StepID: s.ID, State: StepFailed, Error: err.Error()}
	e.put(r)
	e.event(EventStepFailed, s.ID, "", map[string]any{"item": 0, "state": StepFailed, "error": r.Error})
}

// resultOf is a step's result as its dependents see it: a fan-out step's
// is the list of its items' results; a step that did not succeed: null.
func (e *engine) resultOf(step string) json.RawMessage {
	if st, _ := e.status(step); st != stSucceeded {
		return json.RawMessage("null")
	}
	rows := e.rowsOf(step)
	if e.byID[step] == nil || e.byID[step].ForEach == "" {
		return rowResult(rows[0])
	}
	if len(rows) == 1 && rows[0].TaskID == "" {
		return rowResult(rows[0]) // no items: []
	}
	list := make([]json.RawMessage, len(rows))
	for i, r := range rows {
		list[i] = rowResult(r)
	}
	b, _ := json.Marshal(list)
	return b
}

func rowResult(r *store.StepRecord) json.RawMessage {
	if len(r.Result) == 0 {
		return json.RawMessage("null")
	}
	return jsonOrString(r.Result)
}

func (e *engine) neededResults(s *Step) map[string]json.RawMessage {
	res := make(map[string]json.RawMessage, len(s.Needs))
	for _, n := range s.Needs {
		res[n] = e.resultOf(n)
	}
	return res
}

// items evaluates s's when and for_each: run is false when when is false;
// items is nil for a step without for_each.
func (e *engine) items(s *Step, results map[string]json.RawMessage) (run bool, items []json.RawMessage, err error) {
	if s.When == "" && s.ForEach == "" {
		return true, nil, nil
	}
	vars, err := exprVars(e.run.Input, results)
	if err != nil {
		return false, nil, err
	}
	if p := e.prog.when[s.ID]; p != nil {
		ok, err := evalWhen(p, vars)
		if err != nil {
			return false, nil, &whenError{err}
		}
		if !ok {
			return false, nil, nil
		}
	}
	if p := e.prog.forEach[s.ID]; p != nil {
		items, err = evalForEach(p, vars)
		if err != nil {
			return false, nil, err
		}
		if items == nil {
			items = []json.RawMessage{}
		}
	}
	return true, items, nil
}

func (e *engine) startStep(s *Step) error {
	results := e.neededResults(s)
	run, items, err := e.items(s, results)
	var we *whenError
	if s.When != "" {
		res := "true"
		switch {
		case errors.As(err, &we):
			res = "error"
		case err == nil && !run:
			res = "false"
		}
		e.plan.When = append(e.plan.When, Evaluation{Step: s.ID, Result: res})
	}
	switch {
	case errors.As(err, &we) && s.OnWhenError == WhenErrorFalse:
		e.skipOnWhenError(s, we.err)
		return nil
	case err != nil:
		e.fail(s, err)
		return nil
	case !run:
		e.skip(s, whenFalse)
		return nil
	case s.ForEach == "":
		return e.enqueue(s, 0, false, e.payload(results, nil, -1))
	case len(items) == 0:
		e.run.Seq++
		e.put(&store.StepRecord{StepID: s.ID, State: StepSucceeded, Result: json.RawMessage("[]"), CompletedSeq: e.run.Seq})
		body := map[string]any{"items": 0}
		if s.When != "" {
			body["when"] = true
		}
		e.event(EventStepSucceeded, s.ID, "", body)
		return nil
	}
	// The items refer to the run's input (InputRef) rather than copy it.
	if err := e.checkFanOut(s, items, results); err != nil {
		if e.refuseFanOut {
			return err
		}
		e.fail(s, err)
		return nil
	}
	for i, it := range items {
		if s.Concurrency > 0 && i >= s.Concurrency {
			// Held back by the concurrency: feed starts it.
			e.put(&store.StepRecord{StepID: s.ID, Item: i, State: StepWaiting})
			continue
		}
		if err := e.startItem(s, i, it, results); err != nil {
			return err
		}
	}
	return nil
}

// startItem enqueues item i of fan-out step s.
func (e *engine) startItem(s *Step, i int, item json.RawMessage, results map[string]json.RawMessage) error {
	p := map[string]any{InputRef: e.run.RunID, "results": results, "item": item, "index": i}
	return e.enqueue(s, i, true, p)
}

// feed decides the waiting items of a started fan-out step (its
// concurrency held them back): once the step failed, under a policy other
// than halt, they are skipped (under halt they wait: a replay of the dead
// item may resume the step); while the run is halted they wait; once the
// budget ran out they fail; else they start, in item order, while fewer
// than the concurrency are pending.
func (e *engine) feed(s *Step, halted bool) (bool, error) {
	if s.ForEach == "" || s.Concurrency <= 0 {
		return false, nil
	}
	var waiting []*store.StepRecord
	var failed *store.StepRecord
	running := 0
	for _, r := range e.rowsOf(s.ID) {
		switch r.State {
		case StepWaiting:
			waiting = append(waiting, r)
		case StepPending:
			running++
		case StepFailed, StepCanceled:
			if failed == nil {
				failed = r
			}
		}
	}
	if len(waiting) == 0 {
		return false, nil
	}
	if failed != nil {
		if policyOf(s) == Halt {
			return false, nil
		}
		why := fmt.Sprintf("not started: item %d failed", failed.Item)
		for _, r := range waiting {
			r.State, r.Error = StepSkipped, why
			e.put(r)
			e.event(EventStepSkipped, s.ID, "", map[string]any{"item": r.Item, "reason": why})
		}
		return true, nil
	}
	if halted {
		return false, nil
	}
	if deadline, ok := budgetDeadline(s, waiting); ok && !e.now.Before(deadline) {
		why := fmt.Sprintf("not started within the step's for_each budget of %s (it ran out at %s): %d items were not started",
			time.Duration(s.Budget), deadline.UTC().Format(time.RFC3339), len(waiting))
		for _, r := range waiting {
			r.State, r.Error = StepFailed, why
			e.put(r)
			e.event(EventStepFailed, s.ID, "", map[string]any{"item": r.Item, "state": StepFailed, "error": why,
				"budget": time.Duration(s.Budget).String()})
		}
		return true, nil
	}
	free := min(s.Concurrency-running, len(waiting))
	if free <= 0 {
		return false, nil
	}
	results := e.neededResults(s)
	_, items, err := e.items(s, results)
	if err == nil && len(items) <= waiting[len(waiting)-1].Item {
		err = fmt.Errorf("for_each: %d items now, and item %d waits", len(items), waiting[len(waiting)-1].Item)
	}
	if err != nil {
		// The expression read the same input and results when the step
		// started: it cannot fail now unless the definition changed.
		for _, r := range waiting {
			r.State, r.Error = StepFailed, err.Error()
			e.put(r)
			e.event(EventStepFailed, s.ID, "", map[string]any{"item": r.Item, "state": StepFailed, "error": r.Error})
		}
		return true, nil
	}
	for _, r := range waiting[:free] {
		if err := e.startItem(s, r.Item, items[r.Item], results); err != nil {
			return false, err
		}
	}
	return true, nil
}

// budgetDeadline is when the budget of s runs out for its waiting rows
// (written when the step started), and whether it has one.
func budgetDeadline(s *Step, waiting []*store.StepRecord) (time.Time, bool) {
	if s.Budget <= 0 || len(waiting) == 0 {
		return time.Time{}, false
	}
	started := waiting[0].UpdatedAt
	for _, r := range waiting[1:] {
		if r.UpdatedAt.Before(started) {
			started = r.UpdatedAt
		}
	}
	return started.Add(time.Duration(s.Budget)), true
}

// wakeAt is the earliest budget deadline of the fan-out steps whose items
// wait for a slot while the run runs (zero: none).
func (e *engine) wakeAt() time.Time {
	if e.run.State != RunRunning || e.haltRow() != nil {
		return time.Time{}
	}
	var at time.Time
	for i := range e.def.Steps {
		s := &e.def.Steps[i]
		if s.Budget <= 0 {
			continue
		}
		var waiting []*store.StepRecord
		for _, r := range e.rowsOf(s.ID) {
			if r.State == StepWaiting {
				waiting = append(waiting, r)
			}
		}
		if d, ok := budgetDeadline(s, waiting); ok && (at.IsZero() || d.Before(at)) {
			at = d
		}
	}
	return at
}

// dropWaiting cancels the waiting items of the run's fan-out steps (the
// run was canceled, or rolls back): they will never start.
func (e *engine) dropWaiting(why string) {
	for _, k := range e.keys() {
		if r := e.rows[k]; r.State == StepWaiting {
			r.State, r.Error = StepCanceled, why
			e.put(r)
		}
	}
}

// checkFanOut holds a fan-out to the definition's Limits.FanOutBytes.
func (e *engine) checkFanOut(s *Step, items []json.RawMessage, results map[string]json.RawMessage) error {
	bound := e.def.limits.FanOutBytes
	if bound <= 0 {
		return nil
	}
	res, err := json.Marshal(results)
	if err != nil {
		return fmt.Errorf("step %q: results: %v", s.ID, err)
	}
	if n := FanOutSize(e.run.RunID, items, res); n > bound {
		return &FanOutError{Step: s.ID, Items: len(items), Bytes: n, Bound: bound}
	}
	return nil
}

// payload is a normal step's payload: input, results, and a fan-out item.
func (e *engine) payload(results map[string]json.RawMessage, item json.RawMessage, index int) map[string]any {
	p := map[string]any{"input": e.run.Input, "results": results}
	if index >= 0 {
		p["item"], p["index"] = item, index
	}
	return p
}

// payloadOf rebuilds the payload step id had (item when it fans out), for
// a route target's failure.input.
func (e *engine) payloadOf(id string, item int) map[string]any {
	s := e.byID[id]
	results := e.neededResults(s)
	if s.ForEach == "" {
		return e.payload(results, nil, -1)
	}
	_, items, err := e.items(s, results)
	var it json.RawMessage = json.RawMessage("null")
	if err == nil && item >= 0 && item < len(items) {
		it = items[item]
	}
	return e.payload(results, it, item)
}

func (e *engine) startRoute(s *Step, from string, failed *store.StepRecord) error {
	in := e.payloadOf(from, failed.Item)
	if failed.TaskID == "" { // failed before it had a task: no item
		in = e.payloadOf(from, -1)
		delete(in, "item")
		delete(in, "index")
	}
	p := e.payload(map[string]json.RawMessage{}, nil, -1)
	p["failure"] = map[string]any{"step": from, "error": failed.Error, "input": in}
	return e.enqueue(s, 0, false, p)
}

// enqueue writes a pending row and its task.
func (e *engine) enqueue(s *Step, item int, fanOut bool, payload map[string]any) error {
	return e.enqueueAs(s, item, fanOut, payload, "")
}

func (e *engine) enqueueAs(s *Step, item int, fanOut bool, payload map[string]any, compensationOf string) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("step %q: payload: %v", s.ID, err)
	}
	id := StepTaskID(e.run.RunID, s.ID, item, fanOut)
	attrs := map[string]string{AttrRunID: e.run.RunID, AttrWorkflow: e.run.Workflow, AttrStepID: s.ID, AttrPlanHash: e.run.PlanHash}
	if fanOut {
		attrs[AttrStepItem] = strconv.Itoa(item)
	}
	if compensationOf != "" {
		attrs[AttrCompensationOf] = compensationOf
	}
	t := StepTask{TaskID: id, StepID: s.ID, Item: item, Kind: s.Kind, Queue: e.def.queueOf(s),
		Payload: body, Attributes: attrs, Timeout: time.Duration(s.Timeout), Priority: s.Priority}
	if s.Retry != nil {
		t.MaxAttempts = s.Retry.MaxAttempts
		if len(s.Retry.Schedule) > 0 {
			t.Retry = &bt.RetryPolicy{Schedule: slices.Clone(s.Retry.Schedule)}
		}
	}
	e.plan.Enqueue = append(e.plan.Enqueue, t)
	e.put(&store.StepRecord{StepID: s.ID, Item: item, TaskID: id, State: StepPending, CompensationOf: compensationOf})
	ev := map[string]any{"item": item, "kind": s.Kind, "queue": t.Queue}
	if s.When != "" {
		ev["when"] = true // the condition was evaluated, and held
	}
	if compensationOf != "" {
		ev["compensation_of"] = compensationOf
	}
	e.event(EventStepEnqueued, s.ID, id, ev)
	return nil
}

// settleRunning moves a running run once its steps say so: halted (failed
// or compensating), or done (succeeded or partial).
func (e *engine) settleRunning() error {
	if r := e.haltRow(); r != nil {
		cause := fmt.Sprintf("step %q: %s", r.StepID, r.Error)
		if e.def.Rollback == OnFail {
			e.dropWaiting("not started: the run rolls back")
			e.setState(RunCompensating, cause)
			e.event(EventRunCompensating, r.StepID, r.TaskID, map[string]any{"error": cause})
			return e.compensate()
		}
		if e.anyPending(true) {
			return nil
		}
		e.run.Error = cause
		e.run.State = RunFailed
		now := e.now
		e.run.FinishedAt = &now
		e.event(EventRunHalted, r.StepID, r.TaskID, map[string]any{"state": RunFailed, "error": cause})
		return nil
	}
	if e.anyPending(true) {
		return nil
	}
	for i := range e.def.Steps {
		s := &e.def.Steps[i]
		if !s.Compensation && len(e.byStep[s.ID]) == 0 {
			return nil // undecided (cannot happen: every step is decided once nothing runs)
		}
	}
	for i := range e.def.Steps {
		s := &e.def.Steps[i]
		if policyOf(s) != Continue {
			continue
		}
		if st, r := e.status(s.ID); st == stFailed {
			e.run.Error = fmt.Sprintf("step %q: %s", s.ID, r.Error)
			e.finish(RunPartial)
			return nil
		}
	}
	e.finish(RunSucceeded)
	return nil
}

// compensate runs the rollback. It waits while any step of the run (not a
// compensation) is pending: a running step settles first, and one that
// succeeds is undone with the rest. Then the compensations run one at a
// time: next is the succeeded row (of a step with a compensate, that had a
// task) not yet compensated whose step no succeeded row still to undo
// depends on (needs it, directly or through other steps), the one that
// completed last first. So a step is undone only after every succeeded
// step that needed it was undone; among independent steps, in reverse
// order of completion.
func (e *engine) compensate() error {
	if e.anyPending(false) {
		return nil // a running step may still succeed, and be undone
	}
	var dead *store.StepRecord
	for _, k := range e.keys() {
		r := e.rows[k]
		if r.CompensationOf == "" {
			continue
		}
		switch r.State {
		case StepPending:
			return nil // one at a time
		case StepFailed, StepCanceled:
			if dead == nil {
				dead = r
			}
		}
	}
	if dead != nil {
		e.run.State = RunCompensationFailed
		now := e.now
		e.run.FinishedAt = &now
		e.event(EventRunFinished, dead.StepID, dead.TaskID, map[string]any{"state": RunCompensationFailed,
			"workflow": e.run.Workflow, "error": fmt.Sprintf("compensation %q of step %q: %s", dead.StepID, dead.CompensationOf, dead.Error)})
		return nil
	}
	if next := e.nextToUndo(); next != nil {
		s := e.byID[next.StepID]
		c := e.byID[s.Compensate]
		p := map[string]any{"input": e.run.Input, "compensating": map[string]any{
			"step": s.ID, "item": next.Item, "result": rowResult(next)}}
		return e.enqueueAs(c, next.Item, s.ForEach != "", p, s.ID)
	}
	if e.run.Error == CanceledError {
		e.finish(RunCanceled)
	} else {
		e.finish(RunCompensated)
	}
	return nil
}

// toUndo reports whether row r is a succeeded step row whose compensation
// has not succeeded yet (none, or not run yet).
func (e *engine) toUndo(r *store.StepRecord) bool {
	if r.CompensationOf != "" || r.State != StepSucceeded || r.TaskID == "" {
		return false
	}
	s := e.byID[r.StepID]
	if s == nil || s.Compensate == "" {
		return false
	}
	c, ok := e.rows[rowKey{s.Compensate, r.Item}]
	return !ok || c.State != StepSucceeded
}

// nextToUndo is the next row to compensate (compensate's rule), or nil.
func (e *engine) nextToUndo() *store.StepRecord {
	// Steps with a row still to undo: a step that depends on one of them
	// (transitively) holds back the steps it depends on.
	open := map[string]bool{}
	for _, r := range e.rows {
		if e.toUndo(r) {
			open[r.StepID] = true
		}
	}
	if len(open) == 0 {
		return nil
	}
	held := map[string]bool{} // steps some open step depends on
	var mark func(string)
	mark = func(id string) {
		s := e.byID[id]
		if s == nil {
			return
		}
		for _, n := range s.Needs {
			if !held[n] {
				held[n] = true
				mark(n)
			}
		}
	}
	for id := range open {
		mark(id)
	}
	var next *store.StepRecord
	for _, r := range e.rows {
		if !e.toUndo(r) || held[r.StepID] {
			continue
		}
		if _, done := e.rows[rowKey{e.byID[r.StepID].Compensate, r.Item}]; done {
			continue // its compensation is pending (or failed): compensate waits for it
		}
		if next == nil || r.CompletedSeq > next.CompletedSeq {
			next = r
		}
	}
	return next
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
