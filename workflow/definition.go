// Package workflow defines Backstop's workflows: a named, versioned graph
// of steps, each step an ordinary Backstop task, declared in YAML or JSON
// (Parse) or with a Go builder (New), and the engine that decides what
// happens to a run when one of its steps settles.
//
// The engine is pure: Start, Advance, Cancel and Resume take a definition,
// a run, its step rows, what just happened and the time, and return a Plan
// (the rows to write, the tasks to enqueue and cancel, the events to
// append). The caller applies the Plan in the transaction that settled the
// step, so nothing is orchestrated in memory and any process may crash at
// any point. The package reads no clock (except NewRunID), starts no
// goroutine and touches no database.
//
// The definition format and the run and step states are described in
// docs/workflows.md.
package workflow

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/google/uuid"
)

// Rollback is what a run does when a step fails under the halt policy.
type Rollback string

const (
	// Manual (the default): the run halts and ends failed once nothing is
	// running; replaying the dead step's task resumes it.
	Manual Rollback = "manual"
	// OnFail: the compensations of every succeeded step run, one at a
	// time, in reverse order of completion.
	OnFail Rollback = "on_fail"
)

// The on_failure policies of a step (besides "route:<step id>").
const (
	// Halt (the default): no new step starts; see Rollback.
	Halt = "halt"
	// Continue: the step is failed, the steps that need it are skipped,
	// the other branches go on, and the run ends partial.
	Continue = "continue"
	// RoutePrefix starts a route policy, "route:<step id>": that step
	// runs with the failure and the failed step's payload.
	RoutePrefix = "route:"
)

// The on_when_error policies of a step: what an error while evaluating
// its when does.
const (
	// WhenErrorFail (the default): the step fails permanently, under its
	// on_failure.
	WhenErrorFail = "fail"
	// WhenErrorFalse ("treat_as_false"): the step is skipped as a false
	// when would skip it; the error is kept on the step's row and in its
	// step.skipped event (when_error), and the plan lists the step in
	// Plan.SkippedOnWhenError.
	WhenErrorFalse = "treat_as_false"
)

// Limits of a definition and of a run.
const (
	// MaxSteps bounds the steps of one definition.
	MaxSteps = 1000
	// MaxItems bounds the items of one fan-out (for_each) step: a longer
	// list fails the step.
	MaxItems = 10000
	// MaxAttemptsLimit bounds retry.max_attempts (the library's rule).
	MaxAttemptsLimit = 1_000_000
	// MaxExprLen bounds a when or for_each expression.
	MaxExprLen = 4096
)

// Definition is a workflow: a named graph of steps. The zero values of
// Queue, Rollback and a step's Queue and OnFailure mean their defaults.
type Definition struct {
	// Name: 1-64 of [A-Za-z0-9_-], starting with a letter or digit.
	Name string `json:"name"`
	// Queue is the default queue of the steps ("default" if empty).
	Queue string `json:"queue,omitempty"`
	// Rollback: Manual (default) or OnFail.
	Rollback Rollback `json:"rollback,omitempty"`
	// SLA is how long a run may take, from its start to its end: a run
	// still running past it, or ending after it, is a missed SLA (a
	// run.sla_missed event, once, at the deadline). 0: none.
	SLA   bt.Duration `json:"sla,omitempty"`
	Steps []Step      `json:"steps"`

	// prog holds the compiled expressions once Validate succeeded.
	prog *compiled
	// limits bound its runs (WithLimits).
	limits Limits
}

// Step is one node of the graph: a task kind and when it runs.
type Step struct {
	// ID: 1-64 of [A-Za-z0-9_-], starting with a letter or digit (no
	// dots: a step's task id is <run id>.<step id>).
	ID string `json:"id"`
	// Kind is the task kind its handler is registered under.
	Kind string `json:"kind"`
	// Queue: default Definition.Queue.
	Queue string   `json:"queue,omitempty"`
	Needs []string `json:"needs,omitempty"`
	// Compensate names the step (with Compensation set) that undoes this
	// one when the run rolls back.
	Compensate string `json:"compensate,omitempty"`
	// Compensation: the step runs only as a compensation.
	Compensation bool `json:"compensation,omitempty"`
	// OnFailure: Halt (default), Continue or "route:<step id>".
	OnFailure string      `json:"on_failure,omitempty"`
	Retry     *Retry      `json:"retry,omitempty"`
	Timeout   bt.Duration `json:"timeout,omitempty"`
	// ForEach is a CEL expression over input and results that evaluates
	// to a list: one task per element (fan-out); the steps that need this
	// one wait for all of them (fan-in).
	ForEach string `json:"for_each,omitempty"`
	// When is a CEL expression over input and results that evaluates to
	// a bool: false skips the step (and the steps that need it).
	When string `json:"when,omitempty"`
	// OnWhenError: WhenErrorFail (default, also "") or WhenErrorFalse;
	// only on a step with a when.
	OnWhenError string `json:"on_when_error,omitempty"`
	// Concurrency bounds the items of a for_each step enqueued and not
	// settled at once: the next item (in item order) starts when one
	// settles; 1 runs them one after the other. 0: every item at once.
	Concurrency int `json:"concurrency,omitempty"`
	// Budget bounds the time, from the step's start, in which its items
	// may start (a for_each step with a concurrency): the items not
	// started by then fail, naming the budget, and the step follows its
	// on_failure. 0: no bound.
	Budget   bt.Duration `json:"budget,omitempty"`
	Priority int         `json:"priority,omitempty"`
	// SLA is how long the step may take from its start (its task
	// enqueued; a for_each step: its earliest unfinished item's) to its
	// end, retries included: a step still unfinished past it, or ending
	// after it, is a missed SLA (a step.sla_missed event, once). 0: none.
	SLA bt.Duration `json:"sla,omitempty"`
	// Sink names a sink (of the relay's configuration) the step's result
	// is published to, through the outbox, in the transaction that settles
	// the step (a for_each step: each item's result). Empty: none.
	Sink string `json:"sink,omitempty"`
	// SinkTopic is the published message's topic: default
	// "<workflow>.<step id>". Only with a sink.
	SinkTopic string `json:"sink_topic,omitempty"`
	// SinkKey is the published message's key (its order): default the run
	// id. Only with a sink.
	SinkKey string `json:"sink_key,omitempty"`
	// OnSinkFail is what a message the sink gives up on does: SinkHalt
	// (the default), SinkContinue or SinkDeadLetter. Only with a sink.
	OnSinkFail string `json:"on_sink_fail,omitempty"`
}

// The on_sink_fail policies of a step with a sink: what happens when the
// step's message dead-letters (its sink refused it, or its sink queue's
// retry policy gave up).
const (
	// SinkHalt (the default): the message is part of the step; the steps
	// that need it wait for its delivery, and it fails like a failed step
	// (under its on_failure) when the message dead-letters; a replay of
	// the dead message resumes it.
	SinkHalt = "halt"
	// SinkContinue: the run went on when the step succeeded; a dead
	// message is only a dead letter (replayable).
	SinkContinue = "continue"
	// SinkDeadLetter: like SinkHalt while the message is delivered; when
	// it dead-letters, the step's own task becomes the dead letter (the
	// message's reason and error; the message's dead letter is resolved)
	// and the step fails under its on_failure. Replaying the step's task
	// runs its handler again and publishes its new result as a new
	// message (<step task id>.sink.<n>), which the step waits for.
	SinkDeadLetter = "dead_letter"
)

// Retry is a step's retry policy: how many attempts, and the delays
// between them (the last one repeating). Zero values mean the queue's or
// kind's configuration.
type Retry struct {
	MaxAttempts int           `json:"max_attempts,omitempty"`
	Schedule    []bt.Duration `json:"schedule,omitempty"`
}

// DefinitionError is why a definition was refused: the step (if any), the
// field, and the problem.
type DefinitionError struct {
	Step    string
	Field   string
	Problem string
}

func (e *DefinitionError) Error() string {
	var b strings.Builder
	if e.Step != "" {
		fmt.Fprintf(&b, "step %q: ", e.Step)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	return b.String()
}

func defErr(step, field, format string, args ...any) *DefinitionError {
	return &DefinitionError{Step: step, Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Known keys, for Parse's refusal of unknown ones.
var (
	defKeys   = []string{"name", "queue", "rollback", "sla", "steps"}
	stepKeys  = []string{"id", "kind", "queue", "needs", "compensate", "compensation", "on_failure", "retry", "timeout", "for_each", "when", "on_when_error", "concurrency", "budget", "priority", "sla", "sink", "sink_topic", "sink_key", "on_sink_fail"}
	retryKeys = []string{"max_attempts", "schedule"}
)

// Parse reads a definition in YAML or JSON (JSON is read as YAML, of
// which it is a subset), refuses unknown keys (naming them), and
// validates it: the error is a *DefinitionError when the document parsed
// but the definition is wrong.
func Parse(data []byte) (*Definition, error) {
	doc, err := decodeYAML(data)
	if err != nil {
		return nil, err
	}
	if err := checkKeys(doc); err != nil {
		return nil, err
	}
	// Each step is decoded on its own, so that a value of the wrong type
	// is reported with its step.
	var top struct {
		Name     string            `json:"name"`
		Queue    string            `json:"queue"`
		Rollback Rollback          `json:"rollback"`
		SLA      bt.Duration       `json:"sla"`
		Steps    []json.RawMessage `json:"steps"`
	}
	m := maps.Clone(doc.(map[string]any)) // checkKeys made sure
	stepDocs, _ := m["steps"].([]any)
	if stepDocs != nil {
		raws := make([]json.RawMessage, len(stepDocs))
		for i, sd := range stepDocs {
			b, err := json.Marshal(sd)
			if err != nil {
				return nil, typeError(err, stepName(sd, i))
			}
			raws[i] = b
		}
		m["steps"] = raws
	}
	if err := decodeStrict(m, &top); err != nil {
		return nil, typeError(err, "")
	}
	d := Definition{Name: top.Name, Queue: top.Queue, Rollback: top.Rollback, SLA: top.SLA}
	for i, raw := range top.Steps {
		var s Step
		if err := decodeStrict(raw, &s); err != nil {
			return nil, typeError(err, stepName(stepDocs[i], i))
		}
		d.Steps = append(d.Steps, s)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// decodeStrict decodes v (plain values or JSON) into out, refusing
// unknown fields.
func decodeStrict(v any, out any) error {
	js, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if js, err = json.Marshal(v); err != nil {
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

// stepName names a step in an error: its id, or its position.
func stepName(doc any, i int) string {
	if m, ok := doc.(map[string]any); ok {
		if id, ok := m["id"].(string); ok && id != "" {
			return id
		}
	}
	return fmt.Sprintf("#%d", i+1)
}

// typeError rewords encoding/json's error for a value of the wrong type.
func typeError(err error, step string) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if i := strings.LastIndexByte(field, '.'); i >= 0 {
			field = field[i+1:]
		}
		return defErr(step, field, "must be a %s, not a %s", te.Type, te.Value)
	}
	var me *json.UnsupportedValueError
	if errors.As(err, &me) {
		return defErr(step, "", "unsupported value %s", me.Str)
	}
	return defErr(step, "", "%s", strings.TrimPrefix(err.Error(), "json: "))
}

// checkKeys refuses a key the format does not know, naming it (and the
// step it is in).
func checkKeys(doc any) error {
	m, ok := doc.(map[string]any)
	if !ok {
		return &DefinitionError{Problem: "a workflow definition is a mapping (name, queue, rollback, steps)"}
	}
	if err := unknownKey(m, defKeys, ""); err != nil {
		return err
	}
	if err := checkSLA("", m["sla"], "5m"); err != nil {
		return err
	}
	steps, ok := m["steps"].([]any)
	if !ok {
		return nil // type errors are reported by the decoder
	}
	for i, s := range steps {
		sm, ok := s.(map[string]any)
		if !ok {
			return defErr("", "steps", "entry %d is not a mapping", i+1)
		}
		id := stepName(sm, i)
		if err := unknownKey(sm, stepKeys, id); err != nil {
			return err
		}
		if isNumber(sm["timeout"]) {
			return defErr(id, "timeout", "write a duration with its unit, like \"30s\"")
		}
		if isNumber(sm["budget"]) {
			return defErr(id, "budget", "write a duration with its unit, like \"10m\"")
		}
		if err := checkSLA(id, sm["sla"], "30s"); err != nil {
			return err
		}
		if r, ok := sm["retry"].(map[string]any); ok {
			if err := unknownKey(r, retryKeys, id); err != nil {
				err.Field = "retry: " + err.Field
				return err
			}
			if sch, ok := r["schedule"].([]any); ok && slices.ContainsFunc(sch, isNumber) {
				return defErr(id, "retry", "write each schedule entry as a duration with its unit, like \"5s\"")
			}
		}
	}
	return nil
}

// checkSLA refuses an sla that is not a duration with its unit, naming
// the field (and the step).
func checkSLA(step string, v any, example string) error {
	if v == nil {
		return nil
	}
	str, ok := v.(string)
	if !ok {
		return defErr(step, "sla", "write a duration with its unit, like %q", example)
	}
	var d bt.Duration
	if err := json.Unmarshal([]byte(strconv.Quote(str)), &d); err != nil {
		return defErr(step, "sla", "%q is not a duration: write it with its unit, like %q", str, example)
	}
	return nil
}

// isNumber: a YAML or JSON number, where a duration string belongs (a bare
// 30 would be 30 nanoseconds).
func isNumber(v any) bool {
	switch v.(type) {
	case int, int64, uint64, float64:
		return true
	}
	return false
}

func unknownKey(m map[string]any, known []string, step string) *DefinitionError {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			return defErr(step, k, "unknown key (known: %s)", strings.Join(known, ", "))
		}
	}
	return nil
}

// Canonical is the definition as JSON with the defaults filled in (queue,
// rollback, each step's queue and on_failure, a sink step's sink_topic and
// on_sink_fail; on_when_error's and sink_key's defaults left out), needs sorted, and the keys
// in a fixed order: two definitions that mean the same have the same
// canonical form. Parse reads it back.
func (d *Definition) Canonical() []byte {
	c := Definition{Name: d.Name, Queue: d.Queue, Rollback: d.Rollback, SLA: d.SLA}
	if c.Queue == "" {
		c.Queue = "default"
	}
	if c.Rollback == "" {
		c.Rollback = Manual
	}
	c.Steps = make([]Step, len(d.Steps))
	for i, s := range d.Steps {
		if s.Queue == "" {
			s.Queue = c.Queue
		}
		if s.OnFailure == "" && !s.Compensation {
			s.OnFailure = Halt
		}
		if s.OnWhenError == WhenErrorFail {
			// The default stays out of the form, so that the definitions
			// written before the key existed keep their plan hash.
			s.OnWhenError = ""
		}
		if s.Sink != "" {
			s.SinkTopic = cmp.Or(s.SinkTopic, c.Name+"."+s.ID)
			s.OnSinkFail = cmp.Or(s.OnSinkFail, SinkHalt)
		}
		if len(s.Needs) > 0 {
			s.Needs = slices.Clone(s.Needs)
			slices.Sort(s.Needs)
		} else {
			s.Needs = nil
		}
		if s.Retry != nil && s.Retry.MaxAttempts == 0 && len(s.Retry.Schedule) == 0 {
			s.Retry = nil
		}
		if s.Retry != nil && len(s.Retry.Schedule) == 0 {
			s.Retry = &Retry{MaxAttempts: s.Retry.MaxAttempts}
		}
		c.Steps[i] = s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		// Every field is a string, number, bool or list of them.
		panic("workflow: canonical form: " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// Hash is the hex SHA-256 of Canonical: a run's plan_hash.
func (d *Definition) Hash() string {
	sum := sha256.Sum256(d.Canonical())
	return hex.EncodeToString(sum[:])
}

// SinkTaskSuffix ends the task id of the message of a step that waits
// for its delivery: <step task id>.sink (on_sink_fail: halt), or is
// followed by .<n> (dead_letter: each publication has its own id).
const SinkTaskSuffix = ".sink"

// IsSinkMessage reports whether taskID is the id of a message a step
// waits for (SinkTaskSuffix, maybe followed by .<digits>).
func IsSinkMessage(taskID string) bool {
	i := strings.LastIndex(taskID, SinkTaskSuffix)
	if i < 0 {
		return false
	}
	rest := taskID[i+len(SinkTaskSuffix):]
	if rest == "" {
		return true
	}
	if len(rest) < 2 || rest[0] != '.' {
		return false
	}
	for _, c := range rest[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// sinkPolicy is the step's on_sink_fail, default SinkHalt.
func (s *Step) sinkPolicy() string {
	if s.OnSinkFail == "" {
		return SinkHalt
	}
	return s.OnSinkFail
}

// Step returns the step with that id, or nil.
func (d *Definition) Step(id string) *Step {
	for i := range d.Steps {
		if d.Steps[i].ID == id {
			return &d.Steps[i]
		}
	}
	return nil
}

// RouteTarget returns the step id of a "route:<id>" policy, or "".
func (s *Step) RouteTarget() string {
	if t, ok := strings.CutPrefix(s.OnFailure, RoutePrefix); ok {
		return t
	}
	return ""
}

// queueOf is the queue a step's tasks go to.
func (d *Definition) queueOf(s *Step) string {
	switch {
	case s.Queue != "":
		return s.Queue
	case d.Queue != "":
		return d.Queue
	}
	return "default"
}

// QueueOf is the queue of the step with that id (the run's default queue
// for "" or an unknown id).
func (d *Definition) QueueOf(stepID string) string {
	if s := d.Step(stepID); s != nil {
		return d.queueOf(s)
	}
	return d.queueOf(&Step{})
}

// NewRunID returns a new run id: a UUIDv7 (so runs sort by start). It is
// the one function of the package that reads the clock.
func NewRunID() string { return uuid.Must(uuid.NewV7()).String() }
