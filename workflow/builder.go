package workflow

import (
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// Builder builds a Definition in Go:
//
//	def, err := workflow.New("order").Queue("orders").Rollback(workflow.OnFail).
//		Step("reserve", "reserve_slot").Compensate("undo_reserve").
//		Step("charge", "charge_card").Needs("reserve").OnFailure(workflow.Halt).
//		Step("undo_reserve", "release_slot").Compensation().
//		Build()
type Builder struct{ d Definition }

// StepBuilder sets the fields of the step last added; Step and Build go on
// with the workflow.
type StepBuilder struct {
	b *Builder
	i int
}

// New starts a definition named name.
func New(name string) *Builder { return &Builder{d: Definition{Name: name}} }

// Queue sets the default queue of the steps.
func (b *Builder) Queue(q string) *Builder { b.d.Queue = q; return b }

// Rollback sets what a halted run does (Manual or OnFail).
func (b *Builder) Rollback(r Rollback) *Builder { b.d.Rollback = r; return b }

// SLA sets how long a run may take (Definition.SLA).
func (b *Builder) SLA(d time.Duration) *Builder { b.d.SLA = bt.Duration(d); return b }

// Step adds a step running tasks of kind.
func (b *Builder) Step(id, kind string) *StepBuilder {
	b.d.Steps = append(b.d.Steps, Step{ID: id, Kind: kind})
	return &StepBuilder{b: b, i: len(b.d.Steps) - 1}
}

// Build validates the definition (see Definition.Validate) and returns it.
func (b *Builder) Build() (*Definition, error) {
	d := b.d
	d.Steps = append([]Step(nil), b.d.Steps...)
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

func (s *StepBuilder) step() *Step { return &s.b.d.Steps[s.i] }

// Step adds the next step.
func (s *StepBuilder) Step(id, kind string) *StepBuilder { return s.b.Step(id, kind) }

// Build validates the definition and returns it.
func (s *StepBuilder) Build() (*Definition, error) { return s.b.Build() }

// Queue sets the step's queue.
func (s *StepBuilder) Queue(q string) *StepBuilder { s.step().Queue = q; return s }

// Needs adds steps this one runs after.
func (s *StepBuilder) Needs(ids ...string) *StepBuilder {
	s.step().Needs = append(s.step().Needs, ids...)
	return s
}

// Compensate names the compensation step that undoes this one.
func (s *StepBuilder) Compensate(id string) *StepBuilder { s.step().Compensate = id; return s }

// Compensation marks the step as a compensation: it runs only to undo.
func (s *StepBuilder) Compensation() *StepBuilder { s.step().Compensation = true; return s }

// OnFailure sets the failure policy: Halt, Continue or Route(id).
func (s *StepBuilder) OnFailure(policy string) *StepBuilder { s.step().OnFailure = policy; return s }

// Retry sets the step's attempts and retry delays.
func (s *StepBuilder) Retry(maxAttempts int, schedule ...time.Duration) *StepBuilder {
	r := &Retry{MaxAttempts: maxAttempts}
	for _, d := range schedule {
		r.Schedule = append(r.Schedule, bt.Duration(d))
	}
	s.step().Retry = r
	return s
}

// Timeout sets the timeout of each attempt.
func (s *StepBuilder) Timeout(d time.Duration) *StepBuilder {
	s.step().Timeout = bt.Duration(d)
	return s
}

// ForEach sets the step's fan-out expression (CEL, a list).
func (s *StepBuilder) ForEach(expr string) *StepBuilder { s.step().ForEach = expr; return s }

// When sets the step's condition (CEL, a bool).
func (s *StepBuilder) When(expr string) *StepBuilder { s.step().When = expr; return s }

// OnWhenError sets what an error evaluating the step's when does:
// WhenErrorFail (default) or WhenErrorFalse.
func (s *StepBuilder) OnWhenError(policy string) *StepBuilder {
	s.step().OnWhenError = policy
	return s
}

// Concurrency bounds the items of the step's for_each running at once (1:
// one after the other, in item order).
func (s *StepBuilder) Concurrency(n int) *StepBuilder { s.step().Concurrency = n; return s }

// Budget bounds the time, from the step's start, in which its for_each
// items may start (with a Concurrency).
func (s *StepBuilder) Budget(d time.Duration) *StepBuilder {
	s.step().Budget = bt.Duration(d)
	return s
}

// SLA sets how long the step may take (Step.SLA).
func (s *StepBuilder) SLA(d time.Duration) *StepBuilder {
	s.step().SLA = bt.Duration(d)
	return s
}

// Priority sets the priority of the step's tasks.
func (s *StepBuilder) Priority(p int) *StepBuilder { s.step().Priority = p; return s }

// Route is the on_failure policy that routes a failure to step id.
func Route(id string) string { return RoutePrefix + id }

// Sink publishes the step's result to sink with the on_sink_fail policy
// onFail (Step.Sink, Step.OnSinkFail).
func (s *StepBuilder) Sink(sink, onFail string) *StepBuilder {
	s.step().Sink, s.step().OnSinkFail = sink, onFail
	return s
}
