package workflow

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// decodeYAML reads one YAML (or JSON) document into plain Go values.
func decodeYAML(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, &DefinitionError{Problem: "the definition is not valid UTF-8"}
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &DefinitionError{Problem: "not valid YAML or JSON: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	return doc, nil
}

// idOK: 1-64 of [A-Za-z0-9_-], starting with a letter or digit (workflow
// names, step ids, run ids).
func idOK(s string) bool {
	if len(s) == 0 || len(s) > 64 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// nameOK is the library's rule for kinds and queues: 1-128 of
// [A-Za-z0-9_.:-], starting with a letter or digit.
func nameOK(s string) bool {
	if len(s) == 0 || len(s) > 128 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '_' && c != '.' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ValidRunID reports whether s can be a run id: 1-64 of [A-Za-z0-9_-],
// starting with a letter or digit (no dots: step task ids are
// <run id>.<step id>).
func ValidRunID(s string) error {
	if !idOK(s) {
		return fmt.Errorf("run id %q must be 1-64 characters of letters, digits, '_' or '-', starting with a letter or digit", s)
	}
	return nil
}

// Validate checks the definition and compiles its expressions. The error
// is a *DefinitionError naming the step. It refuses: no steps, a bad name,
// queue, kind or id, a duplicate id, an unknown need or one listed twice,
// a cycle (naming the steps on it), an unknown compensate target or one
// without compensation: true, a compensation step with needs, on_failure,
// for_each, when or a compensate of its own, one named by two steps, by
// none, or needed by a step, a bad on_failure, a route target that is
// unknown, a compensation, the step itself, the target of two steps, or
// has needs, for_each or when, a bad CEL expression (or one that is not a
// bool for when, a list for for_each), a bad retry, timeout or priority,
// a bad on_when_error or one without a when, a concurrency or budget that
// is negative or on a step without for_each, a budget without a
// concurrency, a negative sla (the run's or a step's), a bad sink,
// sink_topic, sink_key or on_sink_fail (or one of the last three without a
// sink, a sink on a compensation step).
//
// Validate writes the compiled expressions into d: do not call it while
// another goroutine uses d (Parse and Build return validated definitions,
// safe to share).
func (d *Definition) Validate() error {
	d.prog = nil
	if !idOK(d.Name) {
		return defErr("", "name", "%q must be 1-64 characters of letters, digits, '_' or '-', starting with a letter or digit", d.Name)
	}
	if d.Queue != "" && !nameOK(d.Queue) {
		return defErr("", "queue", "%q must be 1-128 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit", d.Queue)
	}
	switch d.Rollback {
	case "", Manual, OnFail:
	default:
		return defErr("", "rollback", "%q must be %q or %q", d.Rollback, Manual, OnFail)
	}
	if d.SLA < 0 {
		return defErr("", "sla", "%s is negative (leave it out for no SLA)", d.SLA)
	}
	if len(d.Steps) == 0 {
		return defErr("", "steps", "a workflow needs at least one step")
	}
	if len(d.Steps) > MaxSteps {
		return defErr("", "steps", "%d steps, more than %d", len(d.Steps), MaxSteps)
	}
	byID := make(map[string]*Step, len(d.Steps))
	for i := range d.Steps {
		s := &d.Steps[i]
		if !idOK(s.ID) {
			name := s.ID
			if name == "" {
				name = fmt.Sprintf("#%d", i+1)
			}
			return defErr(name, "id", "%q must be 1-64 characters of letters, digits, '_' or '-', starting with a letter or digit", s.ID)
		}
		if byID[s.ID] != nil {
			return defErr(s.ID, "id", "duplicate step id")
		}
		byID[s.ID] = s
	}
	compensatedBy := map[string]string{} // compensation step -> the step naming it
	routedFrom := map[string]string{}    // route target -> the step routing to it
	for i := range d.Steps {
		s := &d.Steps[i]
		if err := s.checkFields(); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, n := range s.Needs {
			t := byID[n]
			switch {
			case t == nil:
				return defErr(s.ID, "needs", "unknown step %q", n)
			case seen[n]:
				return defErr(s.ID, "needs", "%q is listed twice", n)
			case t.Compensation:
				return defErr(s.ID, "needs", "%q is a compensation step: it runs only as a compensation, so nothing can need it", n)
			}
			seen[n] = true
		}
		if c := s.Compensate; c != "" {
			t := byID[c]
			switch {
			case t == nil:
				return defErr(s.ID, "compensate", "unknown step %q", c)
			case !t.Compensation:
				return defErr(s.ID, "compensate", "step %q is not a compensation step (compensation: true)", c)
			case s.Compensation:
				return defErr(s.ID, "compensate", "a compensation step has no compensation of its own")
			case compensatedBy[c] != "":
				return defErr(s.ID, "compensate", "compensation step %q is already named by step %q; each compensation undoes one step", c, compensatedBy[c])
			}
			compensatedBy[c] = s.ID
		}
		switch {
		case s.OnFailure == "" || s.OnFailure == Halt || s.OnFailure == Continue:
		case strings.HasPrefix(s.OnFailure, RoutePrefix):
			r := s.RouteTarget()
			t := byID[r]
			switch {
			case t == nil:
				return defErr(s.ID, "on_failure", "route to unknown step %q", r)
			case r == s.ID:
				return defErr(s.ID, "on_failure", "a step cannot route its failure to itself")
			case t.Compensation:
				return defErr(s.ID, "on_failure", "route target %q is a compensation step", r)
			case routedFrom[r] != "":
				return defErr(s.ID, "on_failure", "route target %q already handles the failure of step %q; a route target handles one step", r, routedFrom[r])
			case len(t.Needs) > 0 || t.ForEach != "" || t.When != "":
				return defErr(r, "on_failure", "a route target (of step %q) runs when that step fails: it has no needs, for_each or when", s.ID)
			}
			routedFrom[r] = s.ID
		default:
			return defErr(s.ID, "on_failure", "%q must be %q, %q or \"route:<step id>\"", s.OnFailure, Halt, Continue)
		}
	}
	for i := range d.Steps {
		if s := &d.Steps[i]; s.Compensation && compensatedBy[s.ID] == "" {
			// It would never run: most likely a typo in a compensate.
			return defErr(s.ID, "compensation", "no step names this compensation step in its compensate")
		}
	}
	if cyc := findCycle(d, routedFrom); cyc != nil {
		return defErr(cyc[0], "needs", "cycle: %s", strings.Join(cyc, " -> "))
	}
	p, err := compile(d)
	if err != nil {
		return err
	}
	d.prog = p
	return nil
}

func (s *Step) checkFields() error {
	if s.Kind == "" {
		return defErr(s.ID, "kind", "a step needs a kind (the task kind its handler is registered under)")
	}
	if !nameOK(s.Kind) {
		return defErr(s.ID, "kind", "%q must be 1-128 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit", s.Kind)
	}
	if s.Queue != "" && !nameOK(s.Queue) {
		return defErr(s.ID, "queue", "%q must be 1-128 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit", s.Queue)
	}
	if s.Compensation {
		switch {
		case len(s.Needs) > 0:
			return defErr(s.ID, "needs", "a compensation step runs only as a compensation: it has no needs")
		case s.OnFailure != "":
			return defErr(s.ID, "on_failure", "a compensation step has no on_failure: a dead compensation stops the rollback")
		case s.ForEach != "":
			return defErr(s.ID, "for_each", "a compensation step has no for_each: it runs once per item of the step it undoes")
		case s.When != "":
			return defErr(s.ID, "when", "a compensation step has no when")
		}
	}
	if r := s.Retry; r != nil {
		if r.MaxAttempts < 0 || r.MaxAttempts > MaxAttemptsLimit {
			return defErr(s.ID, "retry", "max_attempts %d must be between 1 and %d", r.MaxAttempts, MaxAttemptsLimit)
		}
		for i, d := range r.Schedule {
			if d < 0 {
				return defErr(s.ID, "retry", "schedule entry %d is negative (%s)", i+1, d)
			}
		}
	}
	if s.Timeout < 0 {
		return defErr(s.ID, "timeout", "%s is negative", s.Timeout)
	}
	if s.Priority < math.MinInt16 || s.Priority > math.MaxInt16 {
		return defErr(s.ID, "priority", "%d must be between %d and %d", s.Priority, math.MinInt16, math.MaxInt16)
	}
	if err := s.checkLoop(); err != nil {
		return err
	}
	if err := s.checkSink(); err != nil {
		return err
	}
	for _, e := range [][2]string{{"when", s.When}, {"for_each", s.ForEach}} {
		if len(e[1]) > MaxExprLen {
			return defErr(s.ID, e[0], "expression of %d bytes, more than %d", len(e[1]), MaxExprLen)
		}
	}
	return nil
}

// checkLoop checks on_when_error, concurrency and budget.
func (s *Step) checkLoop() error {
	switch s.OnWhenError {
	case "", WhenErrorFail, WhenErrorFalse:
	default:
		return defErr(s.ID, "on_when_error", "%q must be %q (the default) or %q", s.OnWhenError, WhenErrorFail, WhenErrorFalse)
	}
	if s.OnWhenError != "" && s.When == "" {
		return defErr(s.ID, "on_when_error", "the step has no when to evaluate")
	}
	switch {
	case s.Concurrency < 0:
		return defErr(s.ID, "concurrency", "%d is negative (leave it out to start every item at once)", s.Concurrency)
	case s.Concurrency > MaxItems:
		return defErr(s.ID, "concurrency", "%d is more than %d, the most items a for_each has", s.Concurrency, MaxItems)
	case s.Concurrency > 0 && s.ForEach == "":
		return defErr(s.ID, "concurrency", "only a for_each step has items to run at once")
	}
	switch {
	case s.Budget < 0:
		return defErr(s.ID, "budget", "%s is negative", s.Budget)
	case s.Budget > 0 && s.ForEach == "":
		return defErr(s.ID, "budget", "only a for_each step has items to start within a budget")
	case s.Budget > 0 && s.Concurrency == 0:
		return defErr(s.ID, "budget", "needs a concurrency: without one every item starts with the step, and the budget would never fail one")
	}
	if s.SLA < 0 {
		return defErr(s.ID, "sla", "%s is negative (leave it out for no SLA)", s.SLA)
	}
	return nil
}

// findCycle returns the steps on a cycle of the graph (an edge from each
// need to its dependent, and from a routed step to its route target),
// first step repeated at the end, or nil.
func findCycle(d *Definition, routedFrom map[string]string) []string {
	// after[s]: what s must follow.
	after := make(map[string][]string, len(d.Steps))
	for _, s := range d.Steps {
		after[s.ID] = append(after[s.ID], s.Needs...)
	}
	for r, from := range routedFrom {
		after[r] = append(after[r], from)
	}
	const (
		white = iota
		grey
		black
	)
	color := make(map[string]int, len(d.Steps))
	var stack []string
	var found []string
	var visit func(id string) bool
	visit = func(id string) bool {
		color[id] = grey
		stack = append(stack, id)
		for _, n := range after[id] {
			switch color[n] {
			case grey:
				i := slices.Index(stack, n)
				cyc := slices.Clone(stack[i:])
				// Report it in running order: each step needs the one before.
				slices.Reverse(cyc)
				found = append(cyc, cyc[0])
				return true
			case white:
				if visit(n) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[id] = black
		return false
	}
	for _, s := range d.Steps {
		if color[s.ID] == white && visit(s.ID) {
			return found
		}
	}
	return nil
}

// ValidName reports whether s can be a workflow name, a step id or a run
// id: 1-64 of [A-Za-z0-9_-], starting with a letter or digit.
func ValidName(s string) error {
	if !idOK(s) {
		return fmt.Errorf("%q must be 1-64 characters of letters, digits, '_' or '-', starting with a letter or digit", s)
	}
	return nil
}

// checkSink checks sink, sink_topic, sink_key and on_sink_fail. A sink
// name the relay does not know is allowed (sinks are the relay's
// configuration); one that cannot be a sink name is not.
func (s *Step) checkSink() error {
	if s.Sink == "" {
		for _, f := range [][2]string{{"sink_topic", s.SinkTopic}, {"sink_key", s.SinkKey}, {"on_sink_fail", s.OnSinkFail}} {
			if f[1] != "" {
				return defErr(s.ID, f[0], "only a step with a sink publishes a message")
			}
		}
		return nil
	}
	if !nameOK("sink." + s.Sink) {
		return defErr(s.ID, "sink", "%q must be 1-123 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit", s.Sink)
	}
	if s.Compensation {
		return defErr(s.ID, "sink", "a compensation step publishes nothing")
	}
	if t := s.SinkTopic; t != "" && (len(t) > 255 || strings.ContainsFunc(t, func(r rune) bool { return r <= ' ' || r == 0x7f })) {
		return defErr(s.ID, "sink_topic", "%q must be 1-255 characters without spaces or control characters", t)
	}
	if len(s.SinkKey) > 1024 {
		return defErr(s.ID, "sink_key", "must be at most 1024 bytes")
	}
	switch s.OnSinkFail {
	case "", SinkHalt, SinkContinue, SinkDeadLetter:
	default:
		return defErr(s.ID, "on_sink_fail", "%q must be %q, %q or %q", s.OnSinkFail, SinkHalt, SinkContinue, SinkDeadLetter)
	}
	return nil
}
